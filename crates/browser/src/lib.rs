//! Chrome pool and page capture over CDP (chromiumoxide).
pub mod egress;
