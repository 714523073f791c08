//! The webhook signing key's file: `webhook-signing.key` in the data
//! directory, the 32-byte Ed25519 seed. Generated once, from the kernel's
//! random source, the first time a server starts on a directory, and
//! written atomically (a temporary file, fsync, rename, fsync of the
//! directory) with mode 0600, so a crash leaves either no key or the whole
//! key; every later start loads it, so the key id (`kid`) receivers trust
//! survives restarts. Replacing the file while stopped rotates the key.
//!
//! In a replicated cell the file is not used: every node derives the one
//! key from the cell's shared secret (HKDF-SHA256, RFC 5869), so whichever
//! node leads signs with the key every node publishes, and the key id
//! stays the same across failovers. Rotating the cell secret rotates it.

use crate::protocol::subs::sign::WebhookKey;
use anyhow::{bail, Context};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const FILE_NAME: &str = "webhook-signing.key";

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

/// Loads the key under `dir`, creating it first if there is none.
pub(super) fn load_or_create(dir: &Path) -> anyhow::Result<WebhookKey> {
    let path = dir.join(FILE_NAME);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let seed: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
                anyhow::anyhow!("{}: {} bytes; a webhook signing key is 32", path.display(), bytes.len())
            })?;
            let mode = std::fs::metadata(&path)?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!("{}: readable by others (mode {:o}): chmod 600 it", path.display(), mode & 0o777);
            }
            Ok(WebhookKey::from_seed(&seed))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(dir),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
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
    fn a_cell_key_is_the_same_for_the_same_secret_and_another_for_another() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let a = derive_for_cell(secret);
        assert_eq!(derive_for_cell(secret).kid(), a.kid(), "every node of the cell derives one key");
        assert_ne!(derive_for_cell(b"0123456789abcdef0123456789abcdeF").kid(), a.kid());
        assert_ne!(a.kid(), WebhookKey::from_seed(&[0; 32]).kid());
    }
}
