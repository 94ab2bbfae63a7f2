//! Authentication: who a request comes from, by the apiserver's order. A client certificate
//! that verified names the user; else a bearer token from the token file does; else, with
//! anonymous requests allowed, `system:anonymous`.
//!
//! Credentials that do not verify are never anonymous: a certificate that does not verify
//! (unless a good token comes with it), a bearer token that is not in the token file (or any
//! bearer token when there is no token file) and a Basic `Authorization` (not supported) all
//! get 401.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

use super::token::TokenFile;
use super::{ClientCert, UserInfo};

/// The credentials a request carries did not verify: 401.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unauthenticated {
    /// The client certificate does not verify (and no good token came with it).
    #[error("the client certificate does not verify: {0}")]
    Certificate(Arc<str>),
    /// A bearer token that names no one.
    #[error("invalid bearer token")]
    Token,
    /// An `Authorization` scheme other than Bearer.
    #[error("only bearer tokens are accepted in the Authorization header")]
    Scheme,
    /// No credentials, and anonymous requests are refused.
    #[error("anonymous requests are not allowed")]
    Anonymous,
}

/// Authenticates requests.
#[derive(Debug)]
pub(crate) struct Authenticator {
    tokens: Option<TokenFile>,
    anonymous: Option<Arc<UserInfo>>,
}

impl Authenticator {
    /// With the tokens of `tokens` (if any), and anonymous requests if `anonymous`.
    pub(crate) fn new(tokens: Option<TokenFile>, anonymous: bool) -> Self {
        Authenticator {
            tokens,
            anonymous: anonymous.then(|| Arc::new(UserInfo::anonymous())),
        }
    }

    /// The user a request with connection certificate `cert` and `headers` comes from, or
    /// why its credentials do not verify.
    pub(crate) fn authenticate(
        &self,
        cert: &ClientCert,
        headers: &HeaderMap,
    ) -> Result<Arc<UserInfo>, Unauthenticated> {
        let cert_error = match cert {
            ClientCert::Valid(user) => return Ok(user.clone()),
            ClientCert::Invalid(why) => Some(Unauthenticated::Certificate(why.clone())),
            ClientCert::None => None,
        };
        match bearer(headers) {
            Bearer::Token(token) => {
                let user = self.tokens.as_ref().and_then(|t| t.user(token));
                // A failed certificate is the error reported, as the apiserver's union of
                // authenticators reports the first.
                user.ok_or_else(|| cert_error.unwrap_or(Unauthenticated::Token))
            }
            Bearer::OtherScheme => Err(cert_error.unwrap_or(Unauthenticated::Scheme)),
            Bearer::Absent => match (cert_error, &self.anonymous) {
                (Some(e), _) => Err(e),
                (None, Some(anonymous)) => Ok(anonymous.clone()),
                (None, None) => Err(Unauthenticated::Anonymous),
            },
        }
    }
}

/// What the `Authorization` header holds.
#[derive(Debug, PartialEq, Eq)]
enum Bearer<'a> {
    /// None (or an empty bearer token, which the apiserver takes as none).
    Absent,
    Token(&'a str),
    /// Basic, or anything else.
    OtherScheme,
}

/// Reads `Authorization: Bearer <token>` as the apiserver does: the scheme in any case, the
/// token the word after it.
fn bearer(headers: &HeaderMap) -> Bearer<'_> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Bearer::Absent;
    };
    let Ok(value) = value.to_str() else {
        return Bearer::OtherScheme;
    };
    let mut words = value.trim().splitn(3, ' ');
    match (words.next(), words.next()) {
        (Some(scheme), Some(token)) if scheme.eq_ignore_ascii_case("bearer") => {
            if token.is_empty() {
                Bearer::Absent
            } else {
                Bearer::Token(token)
            }
        }
        (Some(scheme), None) if scheme.is_empty() || scheme.eq_ignore_ascii_case("bearer") => Bearer::Absent,
        _ => Bearer::OtherScheme,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use axum::http::HeaderValue;

    use super::*;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = authorization {
            h.insert(AUTHORIZATION, HeaderValue::from_str(a).unwrap());
        }
        h
    }

    fn authenticator(anonymous: bool) -> Authenticator {
        let tokens = TokenFile::parse(b"good,alice,1,dev\n", Path::new("t.csv")).unwrap();
        Authenticator::new(Some(tokens), anonymous)
    }

    #[test]
    fn credentials_are_read_in_the_apiservers_order() {
        let a = authenticator(true);
        let none = ClientCert::None;
        let alice = a.authenticate(&none, &headers(Some("Bearer good"))).unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.groups, ["dev", "system:authenticated"]);
        assert_eq!(
            a.authenticate(&none, &headers(Some("bearer good"))).unwrap().name,
            "alice"
        );
        let anonymous = a.authenticate(&none, &headers(None)).unwrap();
        assert_eq!(*anonymous, UserInfo::anonymous());
        // An empty bearer token is no token.
        assert_eq!(
            a.authenticate(&none, &headers(Some("Bearer "))).unwrap().name,
            "system:anonymous"
        );
        // Bad credentials are never anonymous.
        assert_eq!(
            a.authenticate(&none, &headers(Some("Bearer bad"))),
            Err(Unauthenticated::Token)
        );
        assert_eq!(
            a.authenticate(&none, &headers(Some("Basic YWxpY2U6cHc="))),
            Err(Unauthenticated::Scheme)
        );
        // A certificate that verified comes first; one that did not is a 401 unless a good
        // token comes with it.
        let cert_user = Arc::new(UserInfo::authenticated("carol", "", vec!["ops".into()]));
        let valid = ClientCert::Valid(cert_user.clone());
        assert_eq!(
            a.authenticate(&valid, &headers(Some("Bearer bad"))),
            Ok(cert_user)
        );
        let invalid = ClientCert::Invalid("expired".into());
        assert!(matches!(
            a.authenticate(&invalid, &headers(None)),
            Err(Unauthenticated::Certificate(_))
        ));
        assert!(matches!(
            a.authenticate(&invalid, &headers(Some("Bearer bad"))),
            Err(Unauthenticated::Certificate(_))
        ));
        assert_eq!(
            a.authenticate(&invalid, &headers(Some("Bearer good")))
                .unwrap()
                .name,
            "alice"
        );
    }

    #[test]
    fn without_anonymous_requests_no_credentials_is_a_401() {
        let a = authenticator(false);
        assert_eq!(
            a.authenticate(&ClientCert::None, &headers(None)),
            Err(Unauthenticated::Anonymous)
        );
        assert_eq!(
            a.authenticate(&ClientCert::None, &headers(Some("Bearer good")))
                .unwrap()
                .name,
            "alice"
        );
    }

    #[test]
    fn without_a_token_file_every_bearer_token_is_a_401() {
        let a = Authenticator::new(None, true);
        assert_eq!(
            a.authenticate(&ClientCert::None, &headers(Some("Bearer x"))),
            Err(Unauthenticated::Token)
        );
        assert!(a.authenticate(&ClientCert::None, &headers(None)).is_ok());
    }
}
