"""A Gradio app for tests/tests/widgets.rs: an order form (Number, Dropdown, Button) in the second
of two Tabs. Each order is appended as a JSON line to the file WIDGETS_LOG names (what the app
received), and the app serves on 127.0.0.1:PORT."""

import json
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

LOG = os.environ["WIDGETS_LOG"]


def order(quantity, fruit):
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"quantity": quantity, "fruit": fruit}) + "\n")
    return f"Ordered {quantity} kg of {fruit}"


with gr.Blocks(title="Fruit shop") as demo:
    gr.Markdown("# Fruit shop")
    with gr.Tabs():
        with gr.Tab("About"):
            gr.Markdown("Fresh fruit, delivered. Orders are taken on the Order tab.")
        with gr.Tab("Order"):
            quantity = gr.Number(label="Quantity (kg)", value=5)
            fruit = gr.Dropdown(["Apples", "Bananas", "Cherries"], label="Fruit", value="Apples")
            button = gr.Button("Place order")
            result = gr.Textbox(label="Result")
            button.click(order, [quantity, fruit], result)

demo.launch(server_name="127.0.0.1", server_port=int(os.environ["PORT"]), show_error=True)
