//! Forks across shards: the source side's validation and copy of what a fork inherits.

use crate::protocol::rules;
use crate::protocol::{json, Error, Offset, StreamKey};
use crate::shard::message::ForkData;
use crate::shard::tiering::ReadStop;
use crate::shard::Shard;
use crate::storage::{io::SegmentStore, RecordLoc};

/// A byte range of one record's body that a fork inherits.
type Piece = (RecordLoc, std::ops::Range<usize>);

impl<S: SegmentStore> Shard<S> {
    /// At boot: the (source, uid) of every fork this shard holds.
    pub fn fork_sources(&self) -> Vec<(StreamKey, u64)> {
        self.state
            .borrow()
            .iter()
            .filter_map(|(_, s)| s.fork.as_ref())
            .map(|f| (StreamKey { bucket: f.bucket.clone(), stream: f.stream.clone() }, f.source_uid))
            .collect()
    }

    /// At the source's owner: validate a fork point (F100/F101), count the
    /// reference, and copy out the data the fork inherits.
    pub(in crate::shard) async fn fork_snapshot(
        &self,
        source: StreamKey,
        offset: Option<Offset>,
        sub_offset: u64,
        content_type: Option<String>,
    ) -> Result<ForkData, Error> {
        let pending = self.state.borrow().get(&source).map(|s| s.last_lsn);
        if let Some(lsn) = pending {
            self.log.durable(lsn).await.map_err(|e| self.storage_err(e))?;
        }
        self.expire_if_due(&source).await;
        let (uid, pieces) =
            self.with_cold(|| self.fork_plan(&source, offset, sub_offset, content_type.as_deref())).await?;
        // Record by record, each with at most one fetch of cold blocks: a
        // fork of cold data interleaved with other streams' spans many
        // blocks, more than the cache holds at once.
        let mut data = Vec::new();
        for (loc, range) in pieces {
            let piece = self
                .with_cold(|| {
                    let mut piece = Vec::new();
                    self.log.read_body(loc, range.clone(), &mut piece).map_err(|e| self.read_stop(e))?;
                    Ok(piece)
                })
                .await?;
            data.extend_from_slice(&piece);
        }
        let mut state = self.state.borrow_mut();
        // Fetches may have awaited: the source must still be the same stream.
        let s = state.get_mut(&source).filter(|s| s.uid == uid && !s.soft_deleted).ok_or(Error::NotFound)?;
        s.fork_refs += 1;
        Ok(ForkData { data, content_type: s.content_type.clone(), lifetime: s.lifetime.clone(), source_uid: s.uid })
    }

    /// The synchronous part of [`Shard::fork_snapshot`]: validate the fork
    /// point and list the record ranges the fork inherits, with the source's uid.
    fn fork_plan(
        &self,
        source: &StreamKey,
        offset: Option<Offset>,
        sub_offset: u64,
        content_type: Option<&str>,
    ) -> Result<(u64, Vec<Piece>), ReadStop> {
        let state = self.state.borrow();
        let s = state.get(source).ok_or(Error::NotFound)?;
        let v = s.visible(self.log.durable_lsn());
        let src = rules::ForkSource {
            soft_deleted: s.soft_deleted,
            trim: s.trim,
            content_type: &s.content_type,
            tail: v.tail,
        };
        let anchor = rules::check_fork_source(&src, content_type, offset)?;
        let chunks = &s.chunks[..v.chunks];
        let mut point = anchor;
        if sub_offset > 0 {
            let i = chunks.partition_point(|c| c.start + c.len as u64 <= anchor);
            let c = chunks.get(i).ok_or_else(|| Error::BadRequest("no data after Stream-Fork-Offset".into()))?;
            let from = (anchor - c.start) as usize;
            let extra = if s.json {
                let mut rest = Vec::new();
                let off = c.data_off as usize + from;
                self.log
                    .read_body(c.loc, off..c.data_off as usize + c.len as usize, &mut rest)
                    .map_err(|e| self.read_stop(e))?;
                json::prefix_len_of_messages(&rest, sub_offset as usize)
            } else {
                let rest = c.len as usize - from;
                (sub_offset as usize <= rest).then_some(sub_offset as usize)
            };
            point += extra
                .ok_or_else(|| Error::BadRequest("Stream-Fork-Sub-Offset is past the end of the message".into()))?
                as u64;
        }
        if point as usize > crate::limits::REQUEST_BODY_BYTES_MAX as usize {
            // Forks copy what they inherit into one record.
            return Err(Error::TooLarge.into());
        }
        let pieces = chunks
            .iter()
            .take_while(|c| c.start < point)
            .map(|c| {
                let take = (point - c.start).min(c.len as u64) as usize;
                (c.loc, c.data_off as usize..c.data_off as usize + take)
            })
            .collect();
        Ok((s.uid, pieces))
    }
}
