//! The browser state a login needs, read from and put into one context: its cookies (CDP
//! `Storage.getCookies` / `Storage.setCookies` on the context's `browserContextId`) and the
//! localStorage of its origins. The worker keeps it in `/api/v2` sessions (cookies) and browser
//! profiles (both); this is the only code that speaks CDP for it.
//!
//! localStorage is read from the top-level document of each open http(s) tab
//! (`Runtime.evaluate`), so a capture holds the origins open at that moment; callers that
//! capture at every step boundary keep earlier origins themselves. It is put back through a
//! script registered on every target of the context before its first document
//! (`Page.addScriptToEvaluateOnNewDocument`, see [`BrowserSession::add_init_script`]): in a
//! document whose origin has saved entries and an empty localStorage, the entries are set
//! before the page's own scripts run — Chromium's DOMStorage domain can only reach origins that
//! already have a frame, i.e. after the page's scripts have looked.
//!
//! Not kept: sessionStorage (per tab, and it ends with the tab by definition; browser-use cloud
//! does not keep it either), IndexedDB (asynchronous, structured-clone values — Blobs, Files,
//! keys — that CDP hands out only as previews of remote objects, so a faithful copy would need
//! page-side code per database on every origin; logins are cookies and localStorage nearly
//! always), service workers and the HTTP cache.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::BrowserSession;
use crate::error::Result;

/// The saved localStorage of one origin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginStorage {
    /// `scheme://host[:port]`, as `location.origin`.
    pub origin: String,
    /// Entries in key order.
    #[serde(rename = "localStorage", default)]
    pub local_storage: Vec<StorageItem>,
}

/// One localStorage entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageItem {
    pub name: String,
    pub value: String,
}

/// Cookies and localStorage of a context, in Playwright's `storageState` layout (`cookies`,
/// `origins[].localStorage[].{name, value}`), the cookies as CDP `Network.Cookie` objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageState {
    #[serde(default)]
    pub cookies: Vec<Value>,
    #[serde(default)]
    pub origins: Vec<OriginStorage>,
}

impl StorageState {
    /// No cookie and no entry.
    pub fn is_empty(&self) -> bool {
        self.cookies.is_empty() && self.origins.iter().all(|o| o.local_storage.is_empty())
    }

    /// The domains of the cookies (without a leading dot), sorted, without duplicates.
    pub fn cookie_domains(&self) -> Vec<String> {
        let mut domains: Vec<String> = self
            .cookies
            .iter()
            .filter_map(|c| c.get("domain").and_then(Value::as_str))
            .map(|d| d.trim_start_matches('.').to_owned())
            .filter(|d| !d.is_empty())
            .collect();
        domains.sort();
        domains.dedup();
        domains
    }
}

/// The page-side reader: the document's origin and its localStorage entries (none for an
/// opaque origin or a document that may not use storage).
const READ_LOCAL_STORAGE: &str = r#"(() => {
  try {
    const origin = location.origin;
    if (!/^https?:/.test(origin)) return null;
    const items = [];
    for (let i = 0; i < localStorage.length; i++) {
      const name = localStorage.key(i);
      items.push([name, localStorage.getItem(name)]);
    }
    return {origin, items};
  } catch (e) { return null; }
})()"#;

/// The fields of a `Network.Cookie` that `Storage.setCookies` takes back (`CookieParam`);
/// session cookies keep no expiry.
pub fn cookie_param(cookie: &Value) -> Option<Value> {
    let object = cookie.as_object()?;
    let mut param = Map::new();
    for key in [
        "name",
        "value",
        "domain",
        "path",
        "secure",
        "httpOnly",
        "sameSite",
        "priority",
        "sourceScheme",
        "sourcePort",
        "partitionKey",
    ] {
        if let Some(value) = object.get(key) {
            param.insert(key.to_owned(), value.clone());
        }
    }
    let session = object
        .get("session")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(expires) = object.get("expires").and_then(Value::as_f64)
        && !session
        && expires > 0.0
    {
        param.insert("expires".to_owned(), json!(expires));
    }
    (param.contains_key("name") && param.contains_key("value")).then_some(Value::Object(param))
}

/// The script that fills an origin's empty localStorage from `origins` (see the module).
pub fn local_storage_init_script(origins: &[OriginStorage]) -> Option<String> {
    let data: BTreeMap<&str, Vec<(&str, &str)>> = origins
        .iter()
        .filter(|o| !o.local_storage.is_empty())
        .map(|o| {
            (
                o.origin.as_str(),
                o.local_storage
                    .iter()
                    .map(|i| (i.name.as_str(), i.value.as_str()))
                    .collect(),
            )
        })
        .collect();
    if data.is_empty() {
        return None;
    }
    // JSON is a JavaScript expression (U+2028/2029 are allowed in string literals since
    // ES2019); the data cannot end the script.
    let data = serde_json::to_string(&data).ok()?;
    Some(format!(
        "(() => {{ try {{ const saved = {data}[location.origin]; \
         if (!saved || localStorage.length) return; \
         for (const [k, v] of saved) localStorage.setItem(k, v); }} catch (e) {{}} }})()"
    ))
}

impl BrowserSession {
    /// The context's cookies (CDP `Network.Cookie` objects).
    pub async fn cookies(&self) -> Result<Vec<Value>> {
        #[derive(Deserialize)]
        struct Cookies {
            cookies: Vec<Value>,
        }
        let answer = self
            .cdp(
                None,
                "Storage.getCookies",
                json!({"browserContextId": self.context_id()}),
            )
            .await?;
        Ok(answer.decode::<Cookies>()?.cookies)
    }

    /// Sets `cookies` (`Network.Cookie` objects; the fields `Storage.setCookies` does not take
    /// are dropped) in the context.
    pub async fn set_cookies(&self, cookies: &[Value]) -> Result<()> {
        let params: Vec<Value> = cookies.iter().filter_map(cookie_param).collect();
        if params.is_empty() {
            return Ok(());
        }
        self.cdp(
            None,
            "Storage.setCookies",
            json!({"cookies": params, "browserContextId": self.context_id()}),
        )
        .await?;
        Ok(())
    }

    /// The localStorage of the origins of the open tabs' top-level documents (one entry per
    /// origin; a tab that does not answer is left out).
    pub async fn local_storage(&self) -> Result<Vec<OriginStorage>> {
        #[derive(Deserialize)]
        struct Evaluated {
            result: Remote,
        }
        #[derive(Deserialize)]
        struct Remote {
            #[serde(default)]
            value: Option<Read>,
        }
        #[derive(Deserialize)]
        struct Read {
            origin: String,
            items: Vec<(String, Option<String>)>,
        }
        let mut origins: BTreeMap<String, Vec<StorageItem>> = BTreeMap::new();
        for tab in self.tabs().await? {
            if !(tab.url.starts_with("http://") || tab.url.starts_with("https://")) {
                continue;
            }
            let answer = self
                .cdp(
                    Some(&tab.target_id),
                    "Runtime.evaluate",
                    json!({"expression": READ_LOCAL_STORAGE, "returnByValue": true,
                           "silent": true}),
                )
                .await;
            let read = match answer.and_then(|a| Ok(a.decode::<Evaluated>()?.result.value)) {
                Ok(read) => read,
                Err(err) => {
                    tracing::debug!(error = %err, "could not read a tab's localStorage");
                    continue;
                }
            };
            let Some(read) = read else { continue };
            let mut items: Vec<StorageItem> = read
                .items
                .into_iter()
                .filter_map(|(name, value)| {
                    Some(StorageItem {
                        name,
                        value: value?,
                    })
                })
                .collect();
            items.sort_by(|a, b| a.name.cmp(&b.name));
            origins.insert(read.origin, items);
        }
        Ok(origins
            .into_iter()
            .map(|(origin, local_storage)| OriginStorage {
                origin,
                local_storage,
            })
            .collect())
    }

    /// The context's cookies and the localStorage of its open origins.
    pub async fn storage_state(&self) -> Result<StorageState> {
        let cookies = self.cookies().await?;
        let origins = self.local_storage().await?;
        Ok(StorageState { cookies, origins })
    }

    /// Puts `state` into this (fresh) context before its first navigation: the cookies at
    /// once, the localStorage through a script that runs first in every document of the
    /// context (see the module).
    pub async fn restore_storage_state(&self, state: &StorageState) -> Result<()> {
        self.set_cookies(&state.cookies).await?;
        if let Some(script) = local_storage_init_script(&state.origins) {
            self.add_init_script(script).await?;
        }
        Ok(())
    }

    /// Runs `source` in every document of the context before the page's scripts: registered
    /// on each target the session has attached and on every target it attaches from now on
    /// (tabs it opens, tabs the page opens, cross-origin frames).
    pub async fn add_init_script(&self, source: String) -> Result<()> {
        // Registered for later targets first, so a target attached meanwhile gets it either way.
        self.sessions
            .init_scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(source.clone());
        let attached: Vec<String> = self
            .sessions
            .by_target
            .lock()
            .await
            .values()
            .cloned()
            .collect();
        for session in attached {
            self.chrome
                .conn
                .call_raw(
                    Some(&session),
                    "Page.addScriptToEvaluateOnNewDocument",
                    json!({"source": source}),
                    self.timeout,
                )
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_keep_only_what_set_cookies_takes() {
        let cookie = json!({
            "name": "sid", "value": "abc", "domain": "127.0.0.1", "path": "/",
            "expires": -1, "size": 6, "httpOnly": true, "secure": false, "session": true,
            "priority": "Medium", "sameParty": false, "sourceScheme": "NonSecure",
            "sourcePort": 8080
        });
        let param = cookie_param(&cookie).unwrap();
        assert_eq!(param["name"], "sid");
        assert!(param.get("expires").is_none());
        assert!(param.get("size").is_none());
        assert!(param.get("session").is_none());
        let lasting = json!({"name": "a", "value": "b", "expires": 2e9, "session": false});
        assert_eq!(cookie_param(&lasting).unwrap()["expires"], 2e9);
        assert!(cookie_param(&json!({"value": "x"})).is_none());
    }

    #[test]
    fn the_init_script_carries_only_origins_with_entries() {
        assert!(local_storage_init_script(&[]).is_none());
        let origins = vec![
            OriginStorage {
                origin: "http://a.test".into(),
                local_storage: vec![StorageItem {
                    name: "token".into(),
                    value: "</script>\u{2028}\"x".into(),
                }],
            },
            OriginStorage {
                origin: "http://b.test".into(),
                local_storage: vec![],
            },
        ];
        let script = local_storage_init_script(&origins).unwrap();
        assert!(script.contains(r#""http://a.test":[["token","</script>"#));
        assert!(!script.contains("b.test"));
    }

    #[test]
    fn cookie_domains_are_sorted_and_unique() {
        let state = StorageState {
            cookies: vec![
                json!({"name": "a", "value": "1", "domain": ".b.test"}),
                json!({"name": "b", "value": "1", "domain": "a.test"}),
                json!({"name": "c", "value": "1", "domain": "b.test"}),
            ],
            origins: vec![],
        };
        assert_eq!(state.cookie_domains(), ["a.test", "b.test"]);
    }
}
