//! The webhook signing key's file: `webhook-signing.key` in the data
//! directory, the 32-byte Ed25519 seed. Generated once, from the kernel's
//! random source, the first time a server starts on a directory, and
//! written atomically (a temporary file, fsync, rename, fsync of the
//! directory) with mode 0600, so a crash leaves either no key or the whole
//! key; every later start loads it, so the key id (`kid`) receivers trust
//! survives restarts.
//!
//! Rotation without a gap: a key in `webhook-signing.next.key` is published
//! beside the signing key (receivers that refresh the JWK set now and then
//! learn it before it signs anything); renaming the signing key to
//! `webhook-signing.previous.key` and the next to `webhook-signing.key`
//! makes it sign, the old one still published; removing the previous one
//! ends the rotation. Each step is a file operation and a SIGHUP (or a
//! restart). A start that finds no signing key but a next or previous one
//! stops (a rotation was interrupted between its two renames) rather than
//! make a new key nobody knows.
//!
//! In a replicated cell the file is not used: every node derives the one
//! key from the cell's shared secret (HKDF-SHA256, RFC 5869), so whichever
//! node leads signs with the key every node publishes, and the key id
//! stays the same across failovers. Rotating the cell secret rotates it.

use crate::protocol::subs::sign::{KeySet, WebhookKey};
use anyhow::{bail, Context};
use arc_swap::ArcSwap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

pub const FILE_NAME: &str = "webhook-signing.key";
/// The key a rotation makes sign next: published, not yet signing.
pub const NEXT_FILE_NAME: &str = "webhook-signing.next.key";
/// The key a rotation replaced: still published, no longer signing.
pub const PREVIOUS_FILE_NAME: &str = "webhook-signing.previous.key";

/// HKDF's `info`: what the derived bytes are for (another use of the same
/// secret derives other bytes).
const CELL_KEY_INFO: &[u8] = b"ringstream cell webhook signing key, version 1";

/// The cell's webhook signing key, from its shared secret.
pub(super) fn derive_for_cell(secret: &[u8]) -> WebhookKey {
    let mut seed = [0u8; 32];
    hkdf::Hkdf::<sha2::Sha256>::new(None, secret)
        .expand(CELL_KEY_INFO, &mut seed)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    WebhookKey::from_seed(&seed)
}

/// A cell's webhook keys: signing with the key derived from the secret
/// this node proves itself with, and during a cell secret rotation also
/// publishing the one derived from the other secret it accepts, so that a
/// receiver verifies deliveries from nodes on either side of the rotation.
pub(super) fn set_for_cell(secret: &crate::cell::config::Secret) -> KeySet {
    KeySet {
        signing: derive_for_cell(secret.as_bytes()),
        also: secret.accepted().skip(1).map(derive_for_cell).collect(),
    }
}

/// The keys under `dir`: the signing key (created first if there is none
/// and no rotation is under way) and a rotation's next and previous keys.
pub(super) fn load_set(dir: &Path) -> anyhow::Result<KeySet> {
    let also: Vec<WebhookKey> = [NEXT_FILE_NAME, PREVIOUS_FILE_NAME]
        .iter()
        .map(|name| read_key(&dir.join(name)))
        .collect::<anyhow::Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let signing = match read_key(&dir.join(FILE_NAME))? {
        Some(key) => key,
        None if also.is_empty() => create(dir)?,
        None => bail!(
            "{}: missing while {NEXT_FILE_NAME} or {PREVIOUS_FILE_NAME} is there: a key rotation stopped \
             half way (rename the key that should sign to {FILE_NAME})",
            dir.join(FILE_NAME).display()
        ),
    };
    Ok(KeySet { signing, also })
}

/// SIGHUP: the keys under `dir` again (a rotation's step); on an error the
/// keys in force stay.
pub(super) fn reload(dir: &Path, keys: &ArcSwap<KeySet>) {
    match load_set(dir) {
        Ok(set) => {
            let also: Vec<&str> = set.also.iter().map(|k| k.kid()).collect();
            tracing::info!("SIGHUP: webhooks are signed with {}; also published: {also:?}", set.kid());
            keys.store(Arc::new(set));
        }
        Err(e) => tracing::error!("SIGHUP: the webhook keys: {e:#}; the keys in force stay"),
    }
}

/// Loads the key under `dir`, creating it first if there is none.
#[cfg(test)]
fn load_or_create(dir: &Path) -> anyhow::Result<WebhookKey> {
    Ok(load_set(dir)?.signing)
}

/// The key in the file at `path`; None if there is no such file.
fn read_key(path: &Path) -> anyhow::Result<Option<WebhookKey>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let seed: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| anyhow::anyhow!("{}: {} bytes; a webhook signing key is 32", path.display(), bytes.len()))?;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        tracing::warn!("{}: readable by others (mode {:o}): chmod 600 it", path.display(), mode & 0o777);
    }
    Ok(Some(WebhookKey::from_seed(&seed)))
}

fn create(dir: &Path) -> anyhow::Result<WebhookKey> {
    let mut seed = [0u8; 32];
    if let Err(e) = getrandom::fill(&mut seed) {
        bail!("no randomness for the webhook signing key: {e}");
    }
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(&seed)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(FILE_NAME))?;
    std::fs::File::open(dir)?.sync_all()?;
    let key = WebhookKey::from_seed(&seed);
    tracing::info!("created the webhook signing key {} in {}", key.kid(), dir.display());
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_kept_private_and_loaded_again() {
        let dir = std::env::temp_dir().join(format!("rs-webhook-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = load_or_create(&dir).unwrap();
        let mode = std::fs::metadata(dir.join(FILE_NAME)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(&dir).unwrap().kid(), first.kid(), "the same key after a restart");
        assert!(!dir.join(format!("{FILE_NAME}.tmp")).exists());
        std::fs::write(dir.join(FILE_NAME), b"short").unwrap();
        assert!(load_or_create(&dir).is_err(), "a damaged key is refused, never replaced");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_rotation_publishes_next_and_previous_keys_and_an_interrupted_one_stops() {
        let dir = std::env::temp_dir().join(format!("rs-webhook-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let first = load_set(&dir).unwrap().signing;
        std::fs::write(dir.join(NEXT_FILE_NAME), [9u8; 32]).unwrap();
        let staged = load_set(&dir).unwrap();
        assert_eq!(staged.kid(), first.kid(), "the next key does not sign yet");
        assert_eq!(staged.also.len(), 1);
        std::fs::rename(dir.join(FILE_NAME), dir.join(PREVIOUS_FILE_NAME)).unwrap();
        let half = load_set(&dir).unwrap_err().to_string();
        assert!(half.contains("half way"), "{half}");
        assert!(!dir.join(FILE_NAME).exists(), "no new key made in a rotation's middle");
        std::fs::rename(dir.join(NEXT_FILE_NAME), dir.join(FILE_NAME)).unwrap();
        let promoted = load_set(&dir).unwrap();
        assert_eq!(promoted.kid(), WebhookKey::from_seed(&[9; 32]).kid());
        assert_eq!(promoted.also.iter().map(|k| k.kid()).collect::<Vec<_>>(), vec![first.kid()]);
        std::fs::remove_file(dir.join(PREVIOUS_FILE_NAME)).unwrap();
        assert!(load_set(&dir).unwrap().also.is_empty());
        std::fs::write(dir.join(NEXT_FILE_NAME), b"short").unwrap();
        assert!(load_set(&dir).is_err(), "a damaged next key is refused");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_cell_key_is_the_same_for_the_same_secret_and_another_for_another() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let a = derive_for_cell(secret);
        assert_eq!(derive_for_cell(secret).kid(), a.kid(), "every node of the cell derives one key");
        assert_ne!(derive_for_cell(b"0123456789abcdef0123456789abcdeF").kid(), a.kid());
        assert_ne!(a.kid(), WebhookKey::from_seed(&[0; 32]).kid());
    }

    #[test]
    fn during_a_cell_secret_rotation_both_keys_are_published_and_the_own_one_signs() {
        use crate::cell::config::Secret;
        let (old, new) = (Secret::new(vec![1; 32]).unwrap(), Secret::new(vec![2; 32]).unwrap());
        let kid = |s: &Secret| derive_for_cell(s.as_bytes()).kid().to_string();
        let alone = set_for_cell(&old);
        assert_eq!((alone.kid(), alone.also.len()), (kid(&old).as_str(), 0));
        // Step 1 signs with the old key, step 2 with the new; both publish both.
        for (step, signs) in
            [(old.clone().also_accepting(new.clone()), &old), (new.clone().also_accepting(old.clone()), &new)]
        {
            let set = set_for_cell(&step);
            assert_eq!(set.kid(), kid(signs));
            let published: Vec<String> =
                set.jwks()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_string()).collect();
            assert_eq!(published.len(), 2);
            assert!(published.contains(&kid(&old)) && published.contains(&kid(&new)), "{published:?}");
        }
    }
}
