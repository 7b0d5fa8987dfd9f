//! Element plumbing shared by the actions: index lookup, resolving an element to a remote
//! object, calling page functions.

use std::{sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::{Value, json};

use super::exec::Fail;
use crate::{session::BrowserSession, types::ElementInfo};

#[derive(Deserialize)]
pub(super) struct RemoteObject {
    #[serde(default)]
    pub(super) value: Option<Value>,
    #[serde(rename = "objectId", default)]
    pub(super) object_id: Option<String>,
    #[serde(default)]
    pub(super) subtype: Option<String>,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct EvalAnswer {
    pub(super) result: RemoteObject,
    #[serde(rename = "exceptionDetails", default)]
    pub(super) exception: Option<ExceptionDetails>,
}

#[derive(Deserialize)]
pub(super) struct ExceptionDetails {
    #[serde(default)]
    text: String,
    #[serde(default)]
    exception: Option<RemoteObject>,
}

impl ExceptionDetails {
    pub(super) fn message(&self) -> String {
        self.exception
            .as_ref()
            .and_then(|e| e.description.clone())
            .unwrap_or_else(|| self.text.clone())
            .lines()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Where an element lives and its remote object.
pub(super) struct Resolved {
    pub(super) session: String,
    pub(super) object_id: String,
}

impl BrowserSession {
    pub(super) async fn element(&self, index: u32) -> Result<Arc<ElementInfo>, Fail> {
        self.state.lock().await.selector_map.get(&index).cloned().ok_or_else(|| {
            Fail::before_page(format!(
                "Element index {index} not available - page may have changed. Use an index from the current page state."
            ))
        })
    }

    /// The element's remote object. Its failures happen before the action sent anything to
    /// the page.
    pub(super) async fn resolve(&self, el: &ElementInfo) -> Result<Resolved, Fail> {
        self.resolve_inner(el)
            .await
            .map_err(|fail| Fail::before_page(fail.message))
    }

    async fn resolve_inner(&self, el: &ElementInfo) -> Result<Resolved, Fail> {
        #[derive(Deserialize)]
        struct Answer {
            object: RemoteObject,
        }
        let answer: Answer = self
            .chrome
            .conn
            .call_raw(Some(&el.session_id), "DOM.resolveNode", json!({"backendNodeId": el.backend_node_id}), self.timeout)
            .await
            .map_err(|_| Fail::new(format!("Element with index {} is no longer in the page; the page changed. Use the current page state.", el.index)))?
            .decode()?;
        let object_id = answer.object.object_id.ok_or_else(|| {
            Fail::new(format!(
                "Element with index {} could not be resolved",
                el.index
            ))
        })?;
        Ok(Resolved {
            session: el.session_id.clone(),
            object_id,
        })
    }

    /// Runs `function` (a JavaScript function declaration; `this` is the element) on `element`
    /// in its own frame's document, without touching the page otherwise, and returns its JSON
    /// value: one `DOM.resolveNode` and one `Runtime.callFunctionOn`, each bounded by
    /// `timeout`. `Err` says why it could not run.
    pub async fn call_on_element(
        &self,
        element: &ElementInfo,
        function: &str,
        timeout: Duration,
    ) -> Result<Value, String> {
        let resolved = tokio::time::timeout(timeout, self.resolve_inner(element))
            .await
            .map_err(|_| format!("resolving element {} timed out", element.index))?
            .map_err(|fail| fail.message)?;
        self.call_on(&resolved, function, Vec::new(), timeout)
            .await
            .map_err(|fail| fail.message)
    }

    /// Resolves the element and scrolls it into view, both requests in flight together (they
    /// only need the backendNodeId; Chrome runs them in order on the element's session).
    pub(super) async fn resolve_and_scroll_into_view(
        &self,
        el: &ElementInfo,
    ) -> Result<Resolved, Fail> {
        let scroll = self.chrome.conn.call_raw(
            Some(&el.session_id),
            "DOM.scrollIntoViewIfNeeded",
            json!({"backendNodeId": el.backend_node_id}),
            self.timeout,
        );
        let (resolved, _) = tokio::join!(self.resolve(el), scroll);
        resolved
    }

    pub(super) async fn call_on(
        &self,
        r: &Resolved,
        function: &str,
        args: Vec<Value>,
        timeout: Duration,
    ) -> Result<Value, Fail> {
        let arguments: Vec<Value> = args.into_iter().map(|v| json!({"value": v})).collect();
        self.call_on_with(r, function, arguments, timeout).await
    }

    /// [`Self::call_on`] with CDP `CallArgument`s (`{"value": …}` or `{"objectId": …}`).
    pub(super) async fn call_on_with(
        &self,
        r: &Resolved,
        function: &str,
        arguments: Vec<Value>,
        timeout: Duration,
    ) -> Result<Value, Fail> {
        let answer: EvalAnswer = self
            .chrome
            .conn
            .call_raw(
                Some(&r.session),
                "Runtime.callFunctionOn",
                json!({"functionDeclaration": function, "objectId": r.object_id, "arguments": arguments, "returnByValue": true, "awaitPromise": true}),
                timeout,
            )
            .await?
            .decode()?;
        if let Some(ex) = answer.exception {
            return Err(Fail::new(format!("Page script failed: {}", ex.message())));
        }
        Ok(answer.result.value.unwrap_or(Value::Null))
    }

    pub(crate) async fn eval(
        &self,
        session: &str,
        expression: &str,
        timeout: Duration,
    ) -> Result<Value, Fail> {
        let answer: EvalAnswer = self
            .chrome
            .conn
            .call_raw(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
                timeout,
            )
            .await?
            .decode()?;
        if let Some(ex) = answer.exception {
            return Err(Fail::new(format!("Page script failed: {}", ex.message())));
        }
        Ok(answer.result.value.unwrap_or(Value::Null))
    }

    pub(super) async fn focused_session(&self) -> Result<String, Fail> {
        let target = self.focused_target().await?;
        Ok(self.prepare_tab(&target).await?)
    }
}

pub(super) fn describe(el: &ElementInfo) -> String {
    let text: String = el.text.chars().take(60).collect();
    let name = el
        .ax_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(text.trim());
    if name.is_empty() {
        format!("element {} <{}>", el.index, el.tag_name)
    } else {
        format!("element {} <{}> \"{name}\"", el.index, el.tag_name)
    }
}
