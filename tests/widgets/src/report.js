// Sends what the widget holds to the page server (tests/tests/widgets.rs records it), then
// shows the server's acknowledgement so the agent can see the form went through.
export async function report(widget, value) {
  const res = await fetch('/api/submit/' + widget, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(value),
  });
  const body = await res.json();
  return body.saved;
}
