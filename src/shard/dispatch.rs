//! The one road from a request to its owner: this shard runs it, or the
//! mesh hands it to the shard that owns it. Connections (through
//! `server::context`), internal calls between operations and boot all take it.

use super::*;

impl<S: SegmentStore> Shard<S> {
    /// Runs a request on its owner: here, or over the mesh.
    pub fn call(&self, req: ShardRequest) -> Pin<Box<dyn Future<Output = Reply> + '_>> {
        let owner = req.owner(self.shards).unwrap_or(self.id);
        Box::pin(async move {
            if owner == self.id {
                self.handle(req).await
            } else {
                let peers = self.peers.borrow().clone();
                match peers {
                    Some(p) => p.call(owner, req).await,
                    None => Err(Error::Unavailable("no mesh".into())),
                }
            }
        })
    }
}
