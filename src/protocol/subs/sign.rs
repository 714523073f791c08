//! The server's webhook signing key: Ed25519 (`ed25519-dalek`, never hand-
//! rolled), its public half as a JWK set (`__ds/jwks.json`, RFC 8037 `OKP`
//! keys), and the `Webhook-Signature` header a delivery carries:
//! `t=<unix seconds>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">`.
//!
//! A [`KeySet`] is what a server publishes and signs with: the signing key
//! and, during a rotation, the key that comes next or the one that went
//! before, published beside it so that receivers know both.
//!
//! Pure: the key's seed comes from the caller (`server/webhook_key.rs`
//! generates it from the OS and keeps it under the data directory).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The key deliveries are signed with, and its id.
#[derive(Clone)]
pub struct WebhookKey {
    key: SigningKey,
    kid: String,
}

impl std::fmt::Debug for WebhookKey {
    // Never the secret half.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WebhookKey({})", self.kid)
    }
}

impl WebhookKey {
    /// The key of a 32-byte seed. Its id is `ds_` and the first 16
    /// characters of the base64url SHA-256 of its public key: the same key
    /// always has the same id, and a new key a new one.
    pub fn from_seed(seed: &[u8; 32]) -> WebhookKey {
        let key = SigningKey::from_bytes(seed);
        let digest = Sha256::digest(key.verifying_key().as_bytes());
        let kid = format!("ds_{}", &URL_SAFE_NO_PAD.encode(digest)[..16]);
        WebhookKey { key, kid }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK set (`application/jwk-set+json`).
    pub fn jwks(&self) -> Value {
        json!({ "keys": [self.jwk()] })
    }

    /// The public key as one JWK (RFC 8037 `OKP`).
    fn jwk(&self) -> Value {
        let x = URL_SAFE_NO_PAD.encode(self.key.verifying_key().as_bytes());
        json!({ "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "kid": self.kid, "x": x })
    }

    /// The `Webhook-Signature` header of `body` sent at `unix_secs`.
    pub fn signature_header(&self, unix_secs: u64, body: &[u8]) -> String {
        let mut signed = format!("{unix_secs}.").into_bytes();
        signed.extend_from_slice(body);
        let sig = self.key.sign(&signed);
        format!("t={unix_secs},kid={},ed25519={}", self.kid, URL_SAFE_NO_PAD.encode(sig.to_bytes()))
    }
}

/// The signing key and the keys published beside it (a rotation's next
/// or previous key; none outside a rotation).
#[derive(Debug, Clone)]
pub struct KeySet {
    pub signing: WebhookKey,
    pub also: Vec<WebhookKey>,
}

impl KeySet {
    pub fn of(signing: WebhookKey) -> KeySet {
        KeySet { signing, also: Vec::new() }
    }

    /// The id of the key deliveries are signed with.
    pub fn kid(&self) -> &str {
        self.signing.kid()
    }

    /// Every key published, the signing key first (a key given twice, once).
    pub fn jwks(&self) -> Value {
        let mut keys = vec![self.signing.jwk()];
        let mut seen = vec![self.signing.kid()];
        for k in &self.also {
            if !seen.contains(&k.kid()) {
                seen.push(k.kid());
                keys.push(k.jwk());
            }
        }
        json!({ "keys": keys })
    }

    pub fn signature_header(&self, unix_secs: u64, body: &[u8]) -> String {
        self.signing.signature_header(unix_secs, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};

    #[test]
    fn a_key_set_publishes_the_signing_key_first_and_signs_with_it() {
        let (a, b) = (WebhookKey::from_seed(&[1; 32]), WebhookKey::from_seed(&[2; 32]));
        let set = KeySet { signing: b.clone(), also: vec![a.clone(), b.clone()] };
        let kids: Vec<String> =
            set.jwks()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_string()).collect();
        assert_eq!(kids, vec![b.kid().to_string(), a.kid().to_string()], "each once, the signing key first");
        assert_eq!(set.kid(), b.kid());
        assert!(set.signature_header(1, b"x").contains(&format!("kid={}", b.kid())));
        assert_eq!(KeySet::of(a.clone()).jwks(), a.jwks());
    }

    #[test]
    fn a_signature_verifies_with_the_published_key_and_only_for_its_body() {
        let k = WebhookKey::from_seed(&[7; 32]);
        assert!(k.kid().starts_with("ds_") && k.kid().len() == 19);
        assert_eq!(WebhookKey::from_seed(&[7; 32]).kid(), k.kid(), "stable");
        assert_ne!(WebhookKey::from_seed(&[8; 32]).kid(), k.kid());
        let jwk = &k.jwks()["keys"][0];
        assert_eq!(
            (jwk["kty"].as_str(), jwk["crv"].as_str(), jwk["alg"].as_str()),
            (Some("OKP"), Some("Ed25519"), Some("EdDSA"))
        );
        let x: [u8; 32] = URL_SAFE_NO_PAD.decode(jwk["x"].as_str().unwrap()).unwrap().try_into().unwrap();
        let public = VerifyingKey::from_bytes(&x).unwrap();
        let header = k.signature_header(1_700_000_000, b"{\"a\":1}");
        let parts: Vec<&str> = header.split(',').collect();
        assert_eq!(parts[0], "t=1700000000");
        assert_eq!(parts[1], format!("kid={}", k.kid()));
        let sig: [u8; 64] =
            URL_SAFE_NO_PAD.decode(parts[2].strip_prefix("ed25519=").unwrap()).unwrap().try_into().unwrap();
        let sig = Signature::from_bytes(&sig);
        assert!(public.verify(b"1700000000.{\"a\":1}", &sig).is_ok());
        assert!(public.verify(b"1700000000.{\"a\":2}", &sig).is_err());
    }
}
