//! A message as the framer cuts it: a leaf the message rules and the
//! framer share.

/// One message: its type (0 for a startup packet), its body's length, and
/// the captured prefix of its body that was kept.
#[derive(Debug)]
pub(super) struct Message<'a> {
    /// The type byte; 0 for a startup packet.
    pub typ: u8,
    /// The body's captured prefix (after the length field).
    pub body: &'a [u8],
    /// The body's length on the wire.
    pub len: u32,
}

impl Message<'_> {
    /// All of the body is in [`Message::body`].
    pub fn complete(&self) -> bool {
        self.body.len() as u64 == u64::from(self.len)
    }
}
