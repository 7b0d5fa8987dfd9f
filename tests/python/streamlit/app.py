"""A Streamlit app for tests/tests/widgets.rs: a checkbox and a button whose answer takes the
server a moment to compute and comes back over Streamlit's WebSocket, as every update of a
Streamlit page does. Each press of the button is appended as a JSON line to the file
WIDGETS_LOG names (what the server computed with), so a press repeated by an agent that did not
see the first answer shows up as a second line. Run with `streamlit run app.py` (headless, on
127.0.0.1, see tests/src/widgets.rs)."""

import json
import os
import time

import streamlit as st

LOG = os.environ["WIDGETS_LOG"]

st.title("Gift shop")
st.write("One scented candle, 20 EUR. Gift wrap adds 5 EUR.")
gift_wrap = st.checkbox("Gift wrap")
if st.button("Compute total"):
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"gift_wrap": gift_wrap}) + "\n")
    # The backend's work: the answer is rendered only once the server has computed it.
    time.sleep(0.4)
    if gift_wrap:
        st.write("Total: 25 EUR, gift wrapped")
    else:
        st.write("Total: 20 EUR, not gift wrapped")
