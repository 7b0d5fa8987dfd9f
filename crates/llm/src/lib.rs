//! Chat model providers behind one `ChatModel` trait.
