//! Reads of remote segments: served from the block cache, or `Cold` naming
//! the blocks to fetch; the fetch is one ranged GET. Reads stay
//! synchronous: the caller awaits [`Log::fetch_cold`] and reads again.

use super::state::Tier;
use super::Log;
use crate::limits::TIER_BLOCK_BYTES;
use crate::storage::error::{ColdNeed, Error, Result};
use crate::storage::io::SegmentStore;
use crate::storage::log::RecordLoc;
use crate::storage::record;

impl<S: SegmentStore> Log<S> {
    /// Fetches the blocks `need` names into the cache (one ranged GET).
    pub async fn fetch_cold(&self, need: ColdNeed) -> Result<()> {
        self.tier("only remote segments are cold").fetch(need).await
    }
}

impl Tier {
    /// Reads the record at `loc` of a remote segment from cached blocks:
    /// verified like a mapped one, or `Cold` naming the blocks to fetch.
    pub(super) fn read(&self, loc: RecordLoc, range: std::ops::Range<usize>, out: &mut Vec<u8>) -> Result<()> {
        let corrupt = || Error::Corrupt { segment: loc.segment, position: loc.pos };
        let end = loc.pos + record::framed_len(loc.body_len as usize) as u64;
        let blocks = loc.pos / TIER_BLOCK_BYTES..=(end - 1) / TIER_BLOCK_BYTES;
        let mut cache = self.cache.borrow_mut();
        let mut framed = Vec::new();
        for b in blocks.clone() {
            let Some(block) = cache.get(loc.segment, b) else {
                return Err(Error::Cold(ColdNeed { segment: loc.segment, blocks }));
            };
            let from = (loc.pos.max(b * TIER_BLOCK_BYTES) - b * TIER_BLOCK_BYTES) as usize;
            let to = ((end.min((b + 1) * TIER_BLOCK_BYTES) - b * TIER_BLOCK_BYTES) as usize).min(block.len());
            framed.extend_from_slice(block.get(from..to).ok_or_else(corrupt)?);
        }
        drop(cache);
        let (h, body, _) = record::decode(loc.segment, &framed).map_err(|_| corrupt())?;
        if h.body_len != loc.body_len {
            return Err(corrupt());
        }
        out.extend_from_slice(framed[body].get(range).ok_or_else(corrupt)?);
        self.stats.borrow_mut().cold_cached += 1;
        Ok(())
    }

    /// Fetches the blocks `need` names into the cache.
    pub(super) async fn fetch(&self, need: ColdNeed) -> Result<()> {
        let len = match self.remote.borrow().get(&need.segment) {
            Some(r) => r.len,
            // Removed meanwhile: the read that retries will say so.
            None => return Ok(()),
        };
        let start = need.blocks.start() * TIER_BLOCK_BYTES;
        let end = ((need.blocks.end() + 1) * TIER_BLOCK_BYTES).min(len);
        let got = self.link.client.get_range(self.key(need.segment), start..end).await;
        let mut stats = self.stats.borrow_mut();
        match got {
            Ok(bytes) if bytes.len() as u64 == end - start => {
                stats.cold_fetched += 1;
                stats.cold_fetched_bytes += bytes.len() as u64;
                self.cache.borrow_mut().insert(need.segment, *need.blocks.start(), &bytes);
                Ok(())
            }
            other => {
                stats.cold_unavailable += 1;
                let reason = match other {
                    Ok(b) => format!("asked for {} bytes, got {}", end - start, b.len()),
                    Err(e) => e.to_string(),
                };
                Err(Error::ObjectStore { op: "read", segment: need.segment, reason })
            }
        }
    }
}
