//! Google Cloud service-account credentials → OAuth access tokens, for Vertex AI.
//!
//! The service-account JSON key is read when the model is built. A token is fetched with the
//! JWT bearer grant (RFC 7523): a JWT signed RS256 with the account's private key
//! (`ring`, rustls's crypto provider), POSTed to the key file's `token_uri`. The token is cached until a minute
//! before it expires; one fetch at a time.

use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::LlmError;
use crate::error::sanitize_message;

/// The scope Vertex AI needs.
pub(crate) const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Tokens are refreshed this long before they expire.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// The JWT bearer grant type.
const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

#[derive(Deserialize)]
struct ServiceAccountFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
    #[serde(default)]
    project_id: Option<String>,
}

#[derive(Serialize)]
struct JwtHeader<'a> {
    alg: &'static str,
    typ: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kid: Option<&'a str>,
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: &'a str,
    aud: &'a str,
    iat: u64,
    exp: u64,
}

/// A service account that can mint access tokens.
pub(crate) struct ServiceAccountTokens {
    client_email: String,
    key: RsaKeyPair,
    key_id: Option<String>,
    token_uri: Url,
    /// The key file's `project_id`.
    pub project_id: Option<String>,
    client: reqwest::Client,
    cached: tokio::sync::Mutex<Option<(SecretString, Instant)>>,
}

impl std::fmt::Debug for ServiceAccountTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokens")
            .field("client_email", &self.client_email)
            .field("token_uri", &self.token_uri.as_str())
            .finish_non_exhaustive()
    }
}

impl ServiceAccountTokens {
    /// Parses a service-account JSON key. The error never quotes the file's content.
    pub(crate) fn from_json(text: &str, client: reqwest::Client) -> Result<Self, String> {
        let file: ServiceAccountFile = serde_json::from_str(text).map_err(|e| {
            format!(
                "is not a service-account JSON key (line {}, column {}: {})",
                e.line(),
                e.column(),
                match e.classify() {
                    serde_json::error::Category::Data => "missing or mistyped field",
                    _ => "not valid JSON",
                }
            )
        })?;
        if let Some(kind) = &file.kind
            && kind != "service_account"
        {
            return Err(format!(
                "has type `{kind}`; only `service_account` keys are supported"
            ));
        }
        let key = rsa_key_from_pem(&file.private_key)
            .ok_or_else(|| "has a private_key that is not an RSA PEM key".to_owned())?;
        let token_uri = file
            .token_uri
            .as_deref()
            .unwrap_or("https://oauth2.googleapis.com/token");
        let token_uri = Url::parse(token_uri)
            .ok()
            .filter(|u| matches!(u.scheme(), "https" | "http"))
            .ok_or_else(|| "has a token_uri that is not an http(s) URL".to_owned())?;
        Ok(Self {
            client_email: file.client_email,
            key,
            key_id: file.private_key_id,
            token_uri,
            project_id: file.project_id,
            client,
            cached: tokio::sync::Mutex::new(None),
        })
    }

    /// The signed assertion for a token request issued at `now` (seconds since the epoch).
    pub(crate) fn assertion(&self, now: u64) -> Result<String, String> {
        let header = JwtHeader {
            alg: "RS256",
            typ: "JWT",
            kid: self.key_id.as_deref(),
        };
        let claims = Claims {
            iss: &self.client_email,
            scope: CLOUD_PLATFORM_SCOPE,
            aud: self.token_uri.as_str(),
            iat: now,
            exp: now + 3600,
        };
        let encode = |json: serde_json::Result<Vec<u8>>| {
            json.map(|bytes| URL_SAFE_NO_PAD.encode(bytes))
                .map_err(|e| format!("cannot encode the token request: {e}"))
        };
        let signing_input = format!(
            "{}.{}",
            encode(serde_json::to_vec(&header))?,
            encode(serde_json::to_vec(&claims))?
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "cannot sign the token request".to_owned())?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        ))
    }

    /// A valid access token: the cached one, or a new one.
    pub(crate) async fn token(
        &self,
        model: &str,
        timeout: Duration,
    ) -> Result<SecretString, LlmError> {
        let mut cached = self.cached.lock().await;
        if let Some((token, expires)) = cached.as_ref()
            && Instant::now() + REFRESH_MARGIN < *expires
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = self.fetch(model, timeout).await?;
        *cached = Some((token.clone(), Instant::now() + lifetime));
        Ok(token)
    }

    async fn fetch(
        &self,
        model: &str,
        timeout: Duration,
    ) -> Result<(SecretString, Duration), LlmError> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let assertion = self
            .assertion(now)
            .map_err(|message| LlmError::InvalidRequest {
                model: model.to_owned(),
                message,
            })?;
        let form: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", JWT_BEARER_GRANT)
            .append_pair("assertion", &assertion)
            .finish();
        let secrets = [assertion.as_str()];
        let transport = |message: String| LlmError::Transport {
            model: model.to_owned(),
            message: format!("cannot get a Google access token: {message}"),
        };
        let response = self
            .client
            .post(self.token_uri.clone())
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    LlmError::Timeout {
                        model: model.to_owned(),
                        after: timeout,
                    }
                } else {
                    transport("the token endpoint is unreachable".to_owned())
                }
            })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|_| transport("the token answer could not be read".to_owned()))?;
        let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
        if !status.is_success() {
            let described = json
                .as_ref()
                .and_then(|j| {
                    let error = j.get("error")?.as_str()?;
                    let description = j
                        .get("error_description")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("");
                    Some(format!("{error}: {description}"))
                })
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            return Err(LlmError::Status {
                model: model.to_owned(),
                status: status.as_u16(),
                message: format!(
                    "the Google token endpoint refused the service account: {}",
                    sanitize_message(&described, &secrets, 300)
                ),
            });
        }
        let json = json.ok_or_else(|| transport("the token answer is not JSON".to_owned()))?;
        let token = json
            .get("access_token")
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| transport("the token answer has no access_token".to_owned()))?;
        let lifetime = json
            .get("expires_in")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(3600);
        Ok((
            SecretString::from(token.to_owned()),
            Duration::from_secs(lifetime),
        ))
    }
}

/// The RSA key of a PEM private key: PKCS#8 (`PRIVATE KEY`, what Google's key files hold) or
/// PKCS#1 (`RSA PRIVATE KEY`).
fn rsa_key_from_pem(pem: &str) -> Option<RsaKeyPair> {
    let begin = pem.find("-----BEGIN ")? + "-----BEGIN ".len();
    let (label, rest) = pem[begin..].split_once("-----")?;
    let (body, _) = rest.split_once(&format!("-----END {label}-----"))?;
    let body: String = body.split_whitespace().collect();
    let der = STANDARD.decode(body).ok()?;
    match label {
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der).ok(),
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der).ok(),
        _ => None,
    }
}

/// Vertex AI's API root for a region (`global` has no regional prefix).
pub(crate) fn vertex_base_url(region: &str) -> String {
    if region == "global" {
        "https://aiplatform.googleapis.com/v1".to_owned()
    } else {
        format!("https://{region}-aiplatform.googleapis.com/v1")
    }
}

/// What a Vertex model needs besides its wire format: the token source and the model's path.
#[derive(Debug)]
pub(crate) struct VertexTarget {
    pub tokens: std::sync::Arc<ServiceAccountTokens>,
    /// `projects/{project}/locations/{region}/publishers/{publisher}/models/{model}`.
    pub model_path: String,
}

impl VertexTarget {
    pub(crate) async fn bearer(
        &self,
        model: &str,
        timeout: Duration,
    ) -> Result<crate::http::RequestAuth, LlmError> {
        let token = self.tokens.token(model, timeout).await?;
        Ok(crate::http::RequestAuth::Bearer(token))
    }
}

#[cfg(test)]
mod tests {
    use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
    use serde_json::{Value, json};

    use super::*;

    const KEY_FILE: &str = include_str!("../tests/fixtures/test-service-account.json");
    const PUBLIC_KEY_PEM: &str = include_str!("../tests/fixtures/test-service-account.pub.pem");

    fn tokens() -> ServiceAccountTokens {
        ServiceAccountTokens::from_json(KEY_FILE, crate::http_client().unwrap()).unwrap()
    }

    fn decoded(part: &str) -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    }

    #[test]
    fn the_assertion_is_an_rs256_jwt_that_the_public_key_verifies() {
        let tokens = tokens();
        let jwt = tokens.assertion(1_700_000_000).unwrap();
        let (signing_input, signature) = jwt.rsplit_once('.').unwrap();
        let signature = URL_SAFE_NO_PAD.decode(signature).unwrap();
        // The fixture's public key (a SubjectPublicKeyInfo) ends with the key ring verifies with.
        let spki: String = PUBLIC_KEY_PEM
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();
        let public = tokens.key.public().as_ref();
        assert!(STANDARD.decode(spki).unwrap().ends_with(public));
        let verifier = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public);
        verifier
            .verify(signing_input.as_bytes(), &signature)
            .expect("a valid RS256 signature");

        let (header, claims) = signing_input.split_once('.').unwrap();
        assert_eq!(
            decoded(header),
            json!({"alg": "RS256", "typ": "JWT", "kid": "test-key-id-1"})
        );
        assert_eq!(
            decoded(claims),
            json!({
                "iss": "browserd-test@browserd-test-project.iam.gserviceaccount.com",
                "scope": CLOUD_PLATFORM_SCOPE,
                "aud": "http://127.0.0.1:9/token",
                "iat": 1_700_000_000,
                "exp": 1_700_003_600,
            })
        );
        let forged = format!("{header}.{}", URL_SAFE_NO_PAD.encode(br#"{"iss":"other"}"#));
        assert!(verifier.verify(forged.as_bytes(), &signature).is_err());
    }

    #[test]
    fn a_key_that_is_not_an_rsa_pem_key_is_refused_without_quoting_it() {
        let file: Value = serde_json::from_str(KEY_FILE).unwrap();
        for private_key in [
            "SECRET-PEM-CONTENT",
            "-----BEGIN PRIVATE KEY-----\nU0VDUkVU\n-----END PRIVATE KEY-----\n",
            "-----BEGIN EC PRIVATE KEY-----\nU0VDUkVU\n-----END EC PRIVATE KEY-----\n",
        ] {
            let mut file = file.clone();
            file["private_key"] = json!(private_key);
            let error =
                ServiceAccountTokens::from_json(&file.to_string(), crate::http_client().unwrap())
                    .unwrap_err();
            assert_eq!(error, "has a private_key that is not an RSA PEM key");
        }
    }
}
