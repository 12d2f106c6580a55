//! Wake-ups for duplicates waiting on a key (`on_concurrent: wait`).

/// A registration for changes of one key; dropping it unregisters.
pub struct Watch {
    _private: (),
}

impl Watch {
    /// Resolves when the watched key was completed, released or deleted (possibly
    /// spuriously: callers re-read the record).
    pub async fn changed(&mut self) {
        unimplemented!("watch")
    }
}
