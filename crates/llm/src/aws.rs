//! AWS credentials and SigV4 request signing for Bedrock.
//!
//! Credentials are looked up once, when a model is built, in the order of the AWS SDKs: the
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), a profile of
//! the shared credentials file (`aws_profile` / `AWS_PROFILE`, `AWS_SHARED_CREDENTIALS_FILE` or
//! `~/.aws/credentials`; static keys only), then the container role (ECS / EKS Pod Identity:
//! `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`, fetched when first needed and again
//! five minutes before they expire). Signing itself is the `aws-sigv4` crate.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::LlmError;
use crate::error::sanitize_message;

/// The link-local host of the ECS container credentials endpoint.
const ECS_CREDENTIALS_HOST: &str = "http://169.254.170.2";

/// Container credentials are refreshed this long before they expire.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// One set of AWS credentials.
#[derive(Clone)]
pub(crate) struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: SecretString,
    pub session_token: Option<SecretString>,
    pub expires_at: Option<SystemTime>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[REDACTED]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[REDACTED]"),
            )
            .finish()
    }
}

impl AwsCredentials {
    fn secrets(&self) -> Vec<SecretString> {
        let mut secrets = vec![
            self.secret_access_key.clone(),
            SecretString::from(self.access_key_id.clone()),
        ];
        secrets.extend(self.session_token.clone());
        secrets
    }

    fn fresh(&self, now: SystemTime) -> bool {
        self.expires_at.is_none_or(|at| now + REFRESH_MARGIN < at)
    }
}

/// Where the credentials come from.
pub(crate) enum CredentialSource {
    /// Environment variables or a profile: read once.
    Static(AwsCredentials),
    /// The container credentials endpoint: fetched and cached until shortly before expiry.
    Container {
        url: Url,
        authorization: Option<SecretString>,
        client: reqwest::Client,
        cached: tokio::sync::Mutex<Option<AwsCredentials>>,
    },
}

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Static(c) => f.debug_tuple("Static").field(c).finish(),
            Self::Container { .. } => f.write_str("Container"),
        }
    }
}

/// What a lookup of environment variables needs: the registry's key lookup.
pub(crate) type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

impl CredentialSource {
    /// The first source that has credentials: environment, profile, container.
    pub(crate) fn resolve(
        lookup: EnvLookup<'_>,
        profile: Option<&str>,
        client: &reqwest::Client,
    ) -> Result<Self, String> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if let (Some(id), Some(secret)) = (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Self::Static(AwsCredentials {
                access_key_id: id.trim().to_owned(),
                secret_access_key: SecretString::from(secret.trim().to_owned()),
                session_token: get("AWS_SESSION_TOKEN")
                    .map(|t| SecretString::from(t.trim().to_owned())),
                expires_at: None,
            }));
        }
        let explicit_profile = profile.map(str::to_owned).or_else(|| get("AWS_PROFILE"));
        let profile_name = explicit_profile
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let file = get("AWS_SHARED_CREDENTIALS_FILE")
            .or_else(|| get("HOME").map(|home| format!("{home}/.aws/credentials")));
        if let Some(file) = &file
            && let Ok(text) = std::fs::read_to_string(file)
            && let Some(credentials) = profile_credentials(&text, &profile_name)
        {
            return Ok(Self::Static(credentials));
        }
        if let Some(profile) = explicit_profile {
            return Err(format!(
                "AWS profile `{profile}` has no aws_access_key_id / aws_secret_access_key in {}",
                file.as_deref().unwrap_or("~/.aws/credentials")
            ));
        }
        let container_url = get("AWS_CONTAINER_CREDENTIALS_FULL_URI").or_else(|| {
            get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
                .map(|relative| format!("{ECS_CREDENTIALS_HOST}{}", relative.trim()))
        });
        if let Some(url) = container_url {
            let url = Url::parse(url.trim())
                .map_err(|e| format!("the container credentials URI is not a URL ({e})"))?;
            let authorization = match get("AWS_CONTAINER_AUTHORIZATION_TOKEN") {
                Some(token) => Some(token),
                None => match get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
                    Some(path) => Some(std::fs::read_to_string(path.trim()).map_err(|e| {
                        format!("cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: {e}")
                    })?),
                    None => None,
                },
            };
            return Ok(Self::Container {
                url,
                authorization: authorization.map(|t| SecretString::from(t.trim().to_owned())),
                client: client.clone(),
                cached: tokio::sync::Mutex::new(None),
            });
        }
        Err(
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
             AWS_SESSION_TOKEN for temporary ones), a profile in the shared credentials file \
             (aws_profile / AWS_PROFILE), or run with a container role"
                .to_owned(),
        )
    }

    async fn current(&self, model: &str, timeout: Duration) -> Result<AwsCredentials, LlmError> {
        match self {
            Self::Static(credentials) => Ok(credentials.clone()),
            Self::Container {
                url,
                authorization,
                client,
                cached,
            } => {
                let mut cached = cached.lock().await;
                if let Some(credentials) = cached.as_ref()
                    && credentials.fresh(SystemTime::now())
                {
                    return Ok(credentials.clone());
                }
                let fetched =
                    fetch_container_credentials(client, url, authorization.as_ref(), timeout)
                        .await
                        .map_err(|message| LlmError::Transport {
                            model: model.to_owned(),
                            message: format!("cannot get AWS container credentials: {message}"),
                        })?;
                *cached = Some(fetched.clone());
                Ok(fetched)
            }
        }
    }
}

async fn fetch_container_credentials(
    client: &reqwest::Client,
    url: &Url,
    authorization: Option<&SecretString>,
    timeout: Duration,
) -> Result<AwsCredentials, String> {
    let mut request = client.get(url.clone()).timeout(timeout);
    let mut secrets: Vec<&str> = Vec::new();
    if let Some(token) = authorization {
        let mut value = HeaderValue::from_str(token.expose_secret())
            .map_err(|_| "the authorization token is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        request = request.header(reqwest::header::AUTHORIZATION, value);
        secrets.push(token.expose_secret());
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            "timed out".to_owned()
        } else {
            "the endpoint is unreachable".to_owned()
        }
    })?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|_| "the answer could not be read".to_owned())?;
    if !status.is_success() {
        return Err(format!(
            "HTTP {}: {}",
            status.as_u16(),
            sanitize_message(&String::from_utf8_lossy(&body), &secrets, 200)
        ));
    }
    let json: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let field = |name: &str| json.get(name).and_then(serde_json::Value::as_str);
    let (Some(id), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        return Err("the answer has no AccessKeyId / SecretAccessKey".to_owned());
    };
    let expires_at = field("Expiration")
        .and_then(|text| {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()
        })
        .and_then(|at| u64::try_from(at.unix_timestamp()).ok())
        .map(|seconds| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
    Ok(AwsCredentials {
        access_key_id: id.to_owned(),
        secret_access_key: SecretString::from(secret.to_owned()),
        session_token: field("Token").map(|t| SecretString::from(t.to_owned())),
        expires_at,
    })
}

/// `[profile]`'s static keys in a shared credentials file (INI).
fn profile_credentials(text: &str, profile: &str) -> Option<AwsCredentials> {
    let mut in_section = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim();
            in_section = section == profile || section.strip_prefix("profile ") == Some(profile);
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let value = value.trim().to_owned();
            match key.trim() {
                "aws_access_key_id" => id = Some(value),
                "aws_secret_access_key" => secret = Some(value),
                "aws_session_token" => token = Some(value),
                _ => {}
            }
        }
    }
    Some(AwsCredentials {
        access_key_id: id?,
        secret_access_key: SecretString::from(secret?),
        session_token: token.map(SecretString::from),
        expires_at: None,
    })
}

/// Signs requests to one AWS service in one region.
#[derive(Debug)]
pub(crate) struct SigV4Signer {
    pub region: String,
    pub service: &'static str,
    pub source: std::sync::Arc<CredentialSource>,
    pub model: String,
    pub timeout: Duration,
}

impl SigV4Signer {
    /// Adds `x-amz-date`, `x-amz-security-token` (temporary credentials) and `authorization` to
    /// `headers`; returns the secrets that went into the request (for error redaction).
    pub(crate) async fn sign(
        &self,
        url: &Url,
        headers: &mut HeaderMap,
        body: &[u8],
    ) -> Result<Vec<SecretString>, LlmError> {
        let credentials = self.source.current(&self.model, self.timeout).await?;
        let added = sign_headers(
            &credentials,
            &self.region,
            self.service,
            SystemTime::now(),
            "POST",
            url,
            headers,
            body,
        )
        .map_err(|message| LlmError::InvalidRequest {
            model: self.model.clone(),
            message,
        })?;
        for (name, value) in added {
            headers.insert(name, value);
        }
        Ok(credentials.secrets())
    }
}

/// The headers SigV4 adds to a request with these `headers` (all of which are signed).
#[allow(clippy::too_many_arguments)] // the parts of one signature
pub(crate) fn sign_headers(
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    time: SystemTime,
    method: &str,
    url: &Url,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let identity: Identity = Credentials::new(
        credentials.access_key_id.clone(),
        credentials.secret_access_key.expose_secret().to_owned(),
        credentials
            .session_token
            .as_ref()
            .map(|t| t.expose_secret().to_owned()),
        credentials.expires_at,
        "browserd",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("cannot sign the request: {e}"))?
        .into();
    let mut pairs = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let value = value
            .to_str()
            .map_err(|_| format!("header `{name}` is not visible ASCII"))?;
        pairs.push((name.as_str(), value));
    }
    let signable = SignableRequest::new(
        method,
        url.as_str(),
        pairs.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| format!("cannot sign the request: {e}"))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| format!("cannot sign the request: {e}"))?
        .into_parts();
    let (added, _query) = instructions.into_parts();
    added
        .into_iter()
        .map(|header| {
            let name = HeaderName::from_static(header.name());
            let mut value = HeaderValue::from_str(header.value())
                .map_err(|_| format!("the signed header `{name}` is not a header value"))?;
            value.set_sensitive(header.sensitive() || name == reqwest::header::AUTHORIZATION);
            Ok((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_credentials() -> AwsCredentials {
        // AWS's documented example keys of the SigV4 test suite.
        AwsCredentials {
            access_key_id: "AKIDEXAMPLE".to_owned(),
            secret_access_key: SecretString::from("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: None,
            expires_at: None,
        }
    }

    fn authorization(url: &str) -> String {
        // 2015-08-30T12:36:00Z, the test suite's clock.
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        let added = sign_headers(
            &example_credentials(),
            "us-east-1",
            "service",
            time,
            "GET",
            &Url::parse(url).unwrap(),
            &HeaderMap::new(),
            b"",
        )
        .unwrap();
        let date = added
            .iter()
            .find(|(n, _)| n == "x-amz-date")
            .map(|(_, v)| v.to_str().unwrap().to_owned());
        assert_eq!(date.as_deref(), Some("20150830T123600Z"));
        let auth = added
            .iter()
            .find(|(n, _)| n == reqwest::header::AUTHORIZATION)
            .map(|(_, v)| v)
            .unwrap();
        assert!(auth.is_sensitive());
        auth.to_str().unwrap().to_owned()
    }

    /// AWS's published SigV4 test suite: `get-vanilla` and `get-vanilla-query-order-key-case`.
    #[test]
    fn signatures_match_aws_published_test_vectors() {
        assert_eq!(
            authorization("https://example.amazonaws.com/"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        assert!(
            authorization("https://example.amazonaws.com/?Param2=value2&Param1=value1").ends_with(
                "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
            )
        );
    }

    #[test]
    fn credentials_come_from_env_then_profile() {
        let client = crate::http_client().unwrap();
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIAENV".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("env-secret".to_owned()),
            "AWS_SESSION_TOKEN" => Some("env-token".to_owned()),
            _ => None,
        };
        let CredentialSource::Static(c) = CredentialSource::resolve(&env, None, &client).unwrap()
        else {
            panic!("static expected");
        };
        assert_eq!(c.access_key_id, "AKIAENV");
        assert_eq!(c.session_token.unwrap().expose_secret(), "env-token");

        let dir = std::env::temp_dir().join(format!("browserd-aws-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = d\n\n\
             [work]\naws_access_key_id=AKIAWORK\naws_secret_access_key=w\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let env = move |name: &str| (name == "AWS_SHARED_CREDENTIALS_FILE").then(|| path.clone());
        let CredentialSource::Static(c) =
            CredentialSource::resolve(&env, Some("work"), &client).unwrap()
        else {
            panic!("static expected");
        };
        assert_eq!(c.access_key_id, "AKIAWORK");
        let CredentialSource::Static(c) = CredentialSource::resolve(&env, None, &client).unwrap()
        else {
            panic!("static expected");
        };
        assert_eq!(c.access_key_id, "AKIADEFAULT");
        let err = CredentialSource::resolve(&env, Some("nope"), &client).unwrap_err();
        assert!(err.contains("`nope`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();

        let nothing = |_: &str| None;
        let err = CredentialSource::resolve(&nothing, None, &client).unwrap_err();
        assert!(err.contains("AWS_ACCESS_KEY_ID"), "{err}");
    }
}
