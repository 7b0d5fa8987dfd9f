//! Shared helpers for the mock-server tests: a browser-use-like output schema, a registry built
//! from TOML with injected keys and fast backoff, and access to what the mock received.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use browserd_llm::{
    ChatModel, ChatRequest, ImageData, ImageDetail, ImagePart, Message, ModelRegistry,
    ModelsConfig, OutputSchema,
};
use serde_json::{Value, json};
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

pub const OPENAI_KEY: &str = "sk-test-openai-0123456789abcdefXYZ";
pub const ANTHROPIC_KEY: &str = "sk-ant-test-0123456789abcdefXYZ";
pub const GEMINI_KEY: &str = "AIzaTest0123456789abcdefXYZ";
pub const AZURE_KEY: &str = "azure-test-key-0123456789abcdefXYZ";
pub const AZURE_AD_TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.entra-test-token-0123456789";
pub const PRESET_KEY: &str = "gsk_preset_test_0123456789abcdefXYZ";
pub const AWS_ACCESS_KEY_ID: &str = "AKIATESTACCESSKEY123";
pub const AWS_SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYTESTSECRETKEY";
pub const AWS_SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjTESTSESSIONTOKEN0123456789abcdef";
/// What the mock token endpoint hands out.
pub const VERTEX_ACCESS_TOKEN: &str = "ya29.test-access-token-0123456789abcdefXYZ";

/// 1×1 transparent PNG.
pub const PNG_BYTES: [u8; 67] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];
pub const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAACklEQVR4nGMAAQAABQABDQottAAAAABJRU5ErkJggg==";

/// AgentOutput-like schema: optional `thinking`, required brain fields, an action union with a
/// no-parameter action and a `$ref`.
pub fn agent_schema() -> OutputSchema {
    OutputSchema::new(
        "AgentOutput",
        json!({
            "type": "object",
            "properties": {
                "thinking": {"type": "string"},
                "memory": {"type": "string"},
                "next_goal": {"type": "string"},
                "action": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/Action"}}
            },
            "required": ["memory", "next_goal", "action"],
            "additionalProperties": false,
            "$defs": {
                "Action": {"anyOf": [
                    {"type": "object", "properties": {"go_back": {"type": "object", "properties": {}, "additionalProperties": false}},
                     "required": ["go_back"], "additionalProperties": false},
                    {"type": "object", "properties": {"click": {"$ref": "#/$defs/Click"}},
                     "required": ["click"], "additionalProperties": false}
                ]},
                "Click": {"type": "object",
                    "properties": {"index": {"type": "integer", "minimum": 0}},
                    "required": ["index"], "additionalProperties": false}
            }
        }),
    )
}

/// A valid reply for [`agent_schema`].
pub fn good_reply() -> Value {
    json!({"memory": "on the search page", "next_goal": "open the first result",
           "action": [{"click": {"index": 12}}]})
}

/// The same reply as OpenAI strict mode would send it (optional members as null).
pub fn good_reply_strict() -> Value {
    json!({"thinking": null, "memory": "on the search page", "next_goal": "open the first result",
           "action": [{"click": {"index": 12}}]})
}

/// JSON that parses but violates the schema (index is a string, action missing).
pub fn schema_violating_reply() -> Value {
    json!({"memory": "m", "next_goal": "g", "actions": [{"click": {"index": "twelve"}}]})
}

/// `[system, state(user, with screenshot)]` as the agent sends it.
pub fn agent_request() -> ChatRequest {
    let screenshot = ImagePart {
        media_type: "image/png".to_owned(),
        data: ImageData::Bytes(PNG_BYTES.to_vec()),
        detail: ImageDetail::High,
    };
    ChatRequest::new(
        vec![
            Message::system("You are a browser agent. Reply with AgentOutput JSON."),
            Message::user("<browser_state>[12]<a>First result</a></browser_state>")
                .with_image(screenshot),
        ],
        agent_schema(),
    )
}

/// A request without images.
pub fn text_request() -> ChatRequest {
    ChatRequest::new(
        vec![
            Message::system("system prompt"),
            Message::user("state message"),
        ],
        agent_schema(),
    )
}

/// The keys the registry may read.
pub fn test_keys() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("OPENAI_API_KEY".to_owned(), OPENAI_KEY.to_owned()),
        ("ANTHROPIC_API_KEY".to_owned(), ANTHROPIC_KEY.to_owned()),
        ("GEMINI_API_KEY".to_owned(), GEMINI_KEY.to_owned()),
        ("AZURE_OPENAI_API_KEY".to_owned(), AZURE_KEY.to_owned()),
        ("AZURE_AD_TOKEN".to_owned(), AZURE_AD_TOKEN.to_owned()),
        ("PRESET_API_KEY".to_owned(), PRESET_KEY.to_owned()),
        ("AWS_ACCESS_KEY_ID".to_owned(), AWS_ACCESS_KEY_ID.to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY".to_owned(),
            AWS_SECRET_ACCESS_KEY.to_owned(),
        ),
        ("AWS_SESSION_TOKEN".to_owned(), AWS_SESSION_TOKEN.to_owned()),
    ])
}

/// A registry whose environment is `test_keys()` plus `extra` (e.g. a container-credentials
/// URI, GOOGLE_APPLICATION_CREDENTIALS), or without the AWS keys when `aws_keys` is false.
pub fn registry_with_env(toml: &str, extra: &[(&str, String)], aws_keys: bool) -> ModelRegistry {
    let config = ModelsConfig::from_toml_str(toml).expect("valid test config");
    let mut keys = test_keys();
    if !aws_keys {
        keys.retain(|k, _| !k.starts_with("AWS_"));
    }
    for (name, value) in extra {
        keys.insert((*name).to_owned(), value.clone());
    }
    ModelRegistry::with_key_lookup(config, move |name| keys.get(name).cloned())
        .expect("registry")
        .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
}

/// A registry from TOML with the test keys and 5–20 ms backoff.
pub fn registry(toml: &str) -> ModelRegistry {
    let config = ModelsConfig::from_toml_str(toml).expect("valid test config");
    let keys = test_keys();
    ModelRegistry::with_key_lookup(config, move |name| keys.get(name).cloned())
        .expect("registry")
        .with_backoff(Duration::from_millis(5), Duration::from_millis(20))
}

/// Builds `name` from `toml`.
pub fn build(toml: &str, name: &str) -> Arc<dyn ChatModel> {
    registry(toml).build(name).expect("build")
}

/// Bodies of every request the mock received, as JSON.
pub async fn received_bodies(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .expect("recording enabled")
        .iter()
        .map(|r| r.body_json::<Value>().expect("JSON request body"))
        .collect()
}

/// All received requests.
pub async fn received(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.expect("recording enabled")
}

/// Answers with a provider-style error body that echoes every credential header it got, like a
/// misbehaving proxy would.
pub struct EchoCredentials {
    pub status: u16,
}

impl Respond for EchoCredentials {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut seen = Vec::new();
        for header in [
            "authorization",
            "x-api-key",
            "x-goog-api-key",
            "api-key",
            "x-amz-security-token",
        ] {
            if let Some(value) = request.headers.get(header) {
                seen.push(format!("{header}: {}", value.to_str().unwrap_or("?")));
            }
        }
        let echoed = seen.join(", ");
        ResponseTemplate::new(self.status).set_body_json(json!({
            "error": {"message": format!("Incorrect API key provided. You sent {echoed}"),
                      "type": "invalid_request_error"}
        }))
    }
}

/// Asserts that neither Display nor Debug of `error` contains `secret`.
pub fn assert_no_secret(error: &browserd_llm::LlmError, secret: &str) {
    let display = error.to_string();
    let debug = format!("{error:?}");
    assert!(
        !display.contains(secret),
        "key leaked into Display: {display}"
    );
    assert!(!debug.contains(secret), "key leaked into Debug: {debug}");
    // Also a recognisable part of it.
    let middle = &secret[4..secret.len() - 4];
    assert!(
        !display.contains(middle) && !debug.contains(middle),
        "{display} / {debug}"
    );
}

/// Checks the AWS SigV4 signature of a received request with an implementation of the
/// algorithm written here from AWS's specification (not the `aws-sigv4` crate the client uses):
/// canonical request (method, URI-encoded path encoded once more as for every service but S3,
/// sorted query, the signed headers, SHA-256 of the body), string to sign, the derived key.
/// Returns the signed header names.
pub fn verify_sigv4(
    request: &Request,
    access_key_id: &str,
    secret: &str,
    region: &str,
    service: &str,
) -> Vec<String> {
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }
    fn encode(text: &str) -> String {
        let mut out = String::new();
        for byte in text.bytes() {
            if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
                out.push(byte as char);
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
        out
    }
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    let authorization = header("authorization");
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 Credential=")
        .unwrap_or_else(|| panic!("not SigV4: {authorization}"));
    let (credential, rest) = rest.split_once(", SignedHeaders=").unwrap();
    let (signed_headers, signature) = rest.split_once(", Signature=").unwrap();
    let amz_date = header("x-amz-date");
    let date = &amz_date[..8];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    assert_eq!(credential, format!("{access_key_id}/{scope}"));
    let names: Vec<String> = signed_headers.split(';').map(str::to_owned).collect();
    for required in ["host", "x-amz-date", "content-type"] {
        assert!(
            names.iter().any(|n| n == required),
            "{required} unsigned: {signed_headers}"
        );
    }
    let canonical_headers: String = names
        .iter()
        .map(|name| format!("{name}:{}\n", header(name).trim()))
        .collect();
    let path = request.url.path();
    let canonical_path: String = path.split('/').map(encode).collect::<Vec<_>>().join("/");
    let mut query: Vec<(String, String)> = request
        .url
        .query_pairs()
        .map(|(k, v)| (encode(&k), encode(&v)))
        .collect();
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let canonical_request = format!(
        "{}\n{canonical_path}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method.as_str(),
        hex::encode(Sha256::digest(&request.body))
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical_request.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let expected = hex::encode(hmac(&key, string_to_sign.as_bytes()));
    assert_eq!(
        signature, expected,
        "SigV4 signature mismatch for\n{canonical_request}"
    );
    names
}

/// A copy of the test service-account key whose `token_uri` is `token_uri`, in a fresh
/// temporary directory (kept until the test process ends).
pub fn service_account_file(token_uri: &str) -> String {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/test-service-account.json");
    let mut key: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    key["token_uri"] = json!(token_uri);
    let dir = tempfile_dir();
    let path = dir.join(format!("sa-{}.json", fastrand_suffix()));
    std::fs::write(&path, key.to_string()).unwrap();
    path.display().to_string()
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("browserd-llm-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fastrand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed).to_string()
}

/// The mock Google token endpoint: checks the JWT bearer grant (RS256 with the test key's
/// public half, `kid`, issuer, audience = its own URL, the cloud-platform scope) and answers
/// with [`VERTEX_ACCESS_TOKEN`].
pub struct GoogleTokenEndpoint {
    pub audience: String,
}

impl Respond for GoogleTokenEndpoint {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let form: BTreeMap<String, String> = url::form_urlencoded::parse(&request.body)
            .into_owned()
            .collect();
        assert_eq!(
            form.get("grant_type").map(String::as_str),
            Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        );
        assert_eq!(
            request.headers.get("content-type").unwrap(),
            "application/x-www-form-urlencoded"
        );
        let assertion = form.get("assertion").expect("assertion");
        let public = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/test-service-account.pub.pem"),
        )
        .unwrap();
        let (header, claims) = verify_rs256(assertion, &public);
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], "test-key-id-1");
        assert_eq!(
            claims["iss"],
            "browserd-test@browserd-test-project.iam.gserviceaccount.com"
        );
        assert_eq!(claims["aud"], self.audience.as_str());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(
            claims["exp"].as_u64().unwrap() > now,
            "an unexpired assertion"
        );
        assert_eq!(
            claims["scope"],
            "https://www.googleapis.com/auth/cloud-platform"
        );
        assert_eq!(
            claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
            3600
        );
        ResponseTemplate::new(200).set_body_json(json!({
            "access_token": VERTEX_ACCESS_TOKEN, "expires_in": 3599, "token_type": "Bearer"
        }))
    }
}

/// The header and claims of a JWT whose RS256 signature `public_pem` (a `PUBLIC KEY` PEM,
/// SubjectPublicKeyInfo) verifies; panics otherwise.
pub fn verify_rs256(jwt: &str, public_pem: &str) -> (Value, Value) {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let body: String = public_pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let spki = STANDARD.decode(body).expect("a base64 PEM body");
    let (signing_input, signature) = jwt.rsplit_once('.').expect("a signed JWT");
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .expect("a base64url signature");
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        spki_rsa_public_key(&spki),
    )
    .verify(signing_input.as_bytes(), &signature)
    .expect("a valid RS256 signature");
    let (header, claims) = signing_input.split_once('.').expect("header.claims");
    let part = |text: &str| -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(text).expect("base64url")).expect("JSON")
    };
    (part(header), part(claims))
}

/// The `RSAPublicKey` inside a DER SubjectPublicKeyInfo:
/// `SEQUENCE { AlgorithmIdentifier, BIT STRING { RSAPublicKey } }`.
fn spki_rsa_public_key(der: &[u8]) -> &[u8] {
    // (header length, content length) of the DER element at the start of `der`.
    let element = |der: &[u8]| -> (usize, usize) {
        let first = usize::from(der[1]);
        if first < 0x80 {
            (2, first)
        } else {
            let n = first & 0x7f;
            let len = der[2..2 + n]
                .iter()
                .fold(0, |len, &byte| len << 8 | usize::from(byte));
            (2 + n, len)
        }
    };
    let (header, _) = element(der);
    let inside = &der[header..];
    let (header, len) = element(inside);
    let bit_string = &inside[header + len..];
    let (header, len) = element(bit_string);
    // The BIT STRING's first content byte counts its unused bits (0).
    &bit_string[header + 1..header + len]
}
