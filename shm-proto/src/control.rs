//! Messages on the daemon's Unix stream socket (the control path).
//!
//! The socket carries the handshake, model look-ups and status queries;
//! requests never go through it. Frames:
//!
//! ```text
//! u32 LE  length of what follows (kind + reserved + payload), <= MAX_FRAME
//! u16 LE  kind (KIND_*)
//! u16 LE  reserved, 0
//! ...     payload: fixed-width LE integers; strings as u16 LE length + UTF-8
//! ```
//!
//! A session starts with the client's [`Msg::Hello`], whose first fields
//! (magic, version) will keep their place in every future version, so a
//! daemon can always tell an old or new client what is wrong. The daemon
//! answers [`Msg::Welcome`] with two file descriptors attached by
//! `SCM_RIGHTS` — the sealed region memfd, then the eventfd the client writes
//! to wake the daemon — or [`Msg::Refused`] with a reason. A one-shot
//! [`Msg::StatusRequest`] or [`Msg::StatusPage`] may come instead of
//! `Hello`.
//!
//! # Status at any scale
//!
//! A status reply must fit in one frame ([`MAX_FRAME`]), and 4096 clients'
//! entries do not. So the reply is paged by client id: the daemon puts as
//! many clients (in ascending id order, starting at the page's `from_id`)
//! as fit in [`STATUS_PAGE_BUDGET`] bytes of JSON, and names the id to ask
//! for next (`next_client_id`, absent on the last page) beside the total
//! (`clients_total`). `StatusRequest` is the first page. A reader wanting
//! every client asks `StatusPage { from_id: next_client_id }` until no
//! `next_client_id` comes back; clients that connect or leave between
//! pages may be missed or seen, never seen twice.
//!
//! # A model's tensors
//!
//! [`Msg::ModelInfo`] ends with the model's largest batch and its inputs
//! and outputs, in the model's order (the order of a typed request's tensor
//! table, [`crate::tensor`]):
//!
//! ```text
//! u32 LE  max_batch
//! u16 LE  inputs  (<= tensor::MAX_TENSORS)
//! u16 LE  outputs (<= tensor::MAX_TENSORS)
//! then inputs + outputs times:
//!   u16 LE + UTF-8  name (<= tensor::MAX_TENSOR_NAME bytes)
//!   u32 LE          element type code (tensor::ELEM_*)
//!   u8              batched: 1 when dim 0 is the batch, else 0
//!   u8              rank (<= tensor::MAX_DIMS)
//!   rank x u64 LE   dims at batch 1
//! ```
//!
//! The decoder refuses any count, rank, name length, element code or
//! batched byte outside these bounds ([`DecodeError::BadTensor`]), so the
//! largest `ModelInfo` ([`MAX_MODEL_INFO`]) fits in a frame.

/// Largest frame body accepted, in bytes.
pub const MAX_FRAME: usize = 256 * 1024;
/// Bytes of the frame header (length, kind, reserved).
pub const FRAME_HEADER: usize = 8;
/// Longest client name in a `Hello`.
pub const MAX_NAME: usize = 64;
/// Longest first frame (a `Hello` or a status query) a daemon reads before
/// the handshake is done; a longer length prefix is refused unread.
pub const MAX_HANDSHAKE_FRAME: usize = 1024;
/// Most bytes of JSON a daemon puts in one status reply (leaves room for
/// the frame header and length field under [`MAX_FRAME`]).
pub const STATUS_PAGE_BUDGET: usize = 192 * 1024;

/// Bytes of the largest `ModelInfo` body a peer can send: the fixed
/// fields, a model name of `u16::MAX` bytes, and [`crate::tensor::MAX_TENSORS`]
/// inputs and outputs with the longest names and the most dims.
pub const MAX_MODEL_INFO: usize = 4
    + 4
    + 8
    + 8
    + 8
    + 4
    + 2
    + u16::MAX as usize
    + 4
    + 2
    + 2
    + 2 * crate::tensor::MAX_TENSORS * TENSOR_META_MAX;
/// Bytes of one tensor's metadata at most.
const TENSOR_META_MAX: usize =
    2 + crate::tensor::MAX_TENSOR_NAME + 4 + 1 + 1 + 8 * crate::tensor::MAX_DIMS;
const _: () = assert!(MAX_MODEL_INFO <= MAX_FRAME);

/// One input or output of a model, as [`Msg::ModelInfo`] carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorMeta<'a> {
    /// The model's name for it (at most [`crate::tensor::MAX_TENSOR_NAME`] bytes).
    pub name: &'a str,
    /// Element type code ([`crate::tensor`]'s `ELEM_*`).
    pub elem: u32,
    /// Whether dim 0 is the batch dimension.
    pub batched: bool,
    /// Dims in use (at most [`crate::tensor::MAX_DIMS`]).
    pub rank: u8,
    /// Dims at batch 1; entries past `rank` are 0.
    pub dims: [u64; crate::tensor::MAX_DIMS],
}

impl<'a> TensorMeta<'a> {
    /// A tensor's metadata; `None` when it exceeds the protocol's bounds
    /// (name length, rank) or names an unknown element type.
    pub fn new(name: &'a str, elem: u32, batched: bool, dims: &[u64]) -> Option<Self> {
        if name.len() > crate::tensor::MAX_TENSOR_NAME
            || dims.len() > crate::tensor::MAX_DIMS
            || crate::tensor::elem_size(elem).is_none()
        {
            return None;
        }
        let mut d = [0u64; crate::tensor::MAX_DIMS];
        d[..dims.len()].copy_from_slice(dims);
        Some(Self {
            name,
            elem,
            batched,
            rank: dims.len() as u8,
            dims: d,
        })
    }
    /// The dims at batch 1.
    pub fn dims(&self) -> &[u64] {
        &self.dims[..usize::from(self.rank).min(crate::tensor::MAX_DIMS)]
    }
}

/// A model's inputs or outputs in a [`Msg::ModelInfo`]: a slice to encode,
/// or the checked bytes of a decoded frame.
#[derive(Clone, Copy)]
pub enum Tensors<'a> {
    /// Tensors to encode.
    List(&'a [TensorMeta<'a>]),
    /// `count` tensors decoded from `bytes`, already checked.
    Wire {
        /// How many.
        count: u16,
        /// Their encoding.
        bytes: &'a [u8],
    },
}

impl<'a> Tensors<'a> {
    /// How many tensors.
    pub fn len(&self) -> usize {
        match *self {
            Self::List(l) => l.len(),
            Self::Wire { count, .. } => usize::from(count),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The tensors in order.
    pub fn iter(&self) -> TensorIter<'a> {
        match *self {
            Self::List(l) => TensorIter {
                list: l,
                wire: Reader { buf: &[], pos: 0 },
                left: l.len(),
            },
            Self::Wire { count, bytes } => TensorIter {
                list: &[],
                wire: Reader { buf: bytes, pos: 0 },
                left: usize::from(count),
            },
        }
    }
}

impl PartialEq for Tensors<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for Tensors<'_> {}

impl core::fmt::Debug for Tensors<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Iterator over [`Tensors`].
#[derive(Debug, Clone)]
pub struct TensorIter<'a> {
    list: &'a [TensorMeta<'a>],
    wire: Reader<'a>,
    left: usize,
}

impl<'a> Iterator for TensorIter<'a> {
    type Item = TensorMeta<'a>;
    fn next(&mut self) -> Option<TensorMeta<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if let Some((first, rest)) = self.list.split_first() {
            self.list = rest;
            return Some(*first);
        }
        // Checked when the frame was decoded; an error ends the list.
        read_tensor(&mut self.wire).ok()
    }
}

fn read_tensor<'b>(r: &mut Reader<'b>) -> Result<TensorMeta<'b>, DecodeError> {
    let name = r.str()?;
    if name.len() > crate::tensor::MAX_TENSOR_NAME {
        return Err(DecodeError::BadTensor);
    }
    let elem = r.u32()?;
    if crate::tensor::elem_size(elem).is_none() {
        return Err(DecodeError::BadTensor);
    }
    let batched = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(DecodeError::BadTensor),
    };
    let rank = r.u8()?;
    if usize::from(rank) > crate::tensor::MAX_DIMS {
        return Err(DecodeError::BadTensor);
    }
    let mut dims = [0u64; crate::tensor::MAX_DIMS];
    for d in dims.iter_mut().take(usize::from(rank)) {
        *d = r.u64()?;
    }
    Ok(TensorMeta {
        name,
        elem,
        batched,
        rank,
        dims,
    })
}

/// Reads `count` tensors, checking each; returns their bytes.
fn read_tensors<'b>(r: &mut Reader<'b>, count: u16) -> Result<Tensors<'b>, DecodeError> {
    if usize::from(count) > crate::tensor::MAX_TENSORS {
        return Err(DecodeError::BadTensor);
    }
    let start = r.pos;
    for _ in 0..count {
        read_tensor(r)?;
    }
    Ok(Tensors::Wire {
        count,
        bytes: r.buf.get(start..r.pos).ok_or(DecodeError::Truncated)?,
    })
}

/// `Hello` kind.
pub const KIND_HELLO: u16 = 1;
/// `Welcome` kind.
pub const KIND_WELCOME: u16 = 2;
/// `Refused` kind.
pub const KIND_REFUSED: u16 = 3;
/// `LookupModel` kind.
pub const KIND_LOOKUP_MODEL: u16 = 4;
/// `ModelInfo` kind.
pub const KIND_MODEL_INFO: u16 = 5;
/// `ModelNotFound` kind.
pub const KIND_MODEL_NOT_FOUND: u16 = 6;
/// `StatusRequest` kind.
pub const KIND_STATUS_REQUEST: u16 = 7;
/// `StatusReply` kind.
pub const KIND_STATUS_REPLY: u16 = 8;
/// `StatusPage` kind.
pub const KIND_STATUS_PAGE: u16 = 9;
/// `ModelsCommand` kind.
pub const KIND_MODELS_COMMAND: u16 = 20;
/// `ModelsReply` kind.
pub const KIND_MODELS_REPLY: u16 = 21;

/// Operations in [`Msg::ModelsCommand`].
pub mod models_op {
    /// List the models served, with their versions and sources.
    pub const LIST: u32 = 0;
    /// Load (or reload) one model of the repository by name.
    pub const LOAD: u32 = 1;
    /// Unload one model by name.
    pub const UNLOAD: u32 = 2;
    /// Re-scan the whole repository (what SIGHUP does).
    pub const RESCAN: u32 = 3;
}

/// Reasons in [`Msg::Refused`].
pub mod refused {
    /// The client speaks another protocol version.
    pub const VERSION_MISMATCH: u32 = 1;
    /// Same version, different shared-memory layout (mismatched build).
    pub const LAYOUT_MISMATCH: u32 = 2;
    /// `SO_PEERCRED` uid/gid not allowed by the daemon's `[access]` config.
    pub const NOT_ALLOWED: u32 = 3;
    /// `clients.max_clients` reached.
    pub const TOO_MANY_CLIENTS: u32 = 4;
    /// The first frame was not a valid `Hello` or `StatusRequest`.
    pub const BAD_MESSAGE: u32 = 5;
    /// The daemon could not create the region (out of memory, fd limit).
    pub const INTERNAL: u32 = 6;
}

/// A decoded control message; strings borrow from the frame buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg<'a> {
    /// Client → daemon, first frame.
    Hello {
        /// [`crate::MAGIC`].
        magic: u64,
        /// [`crate::PROTOCOL_VERSION`].
        version: u32,
        /// [`crate::LAYOUT_HASH`].
        layout_hash: u64,
        /// The client's pid (informational; the daemon trusts `SO_PEERCRED`).
        pid: u32,
        /// A name for `sluice status`, at most [`MAX_NAME`] bytes.
        name: &'a str,
    },
    /// Daemon → client; the region memfd and wake eventfd ride along.
    Welcome {
        /// The daemon's protocol version.
        version: u32,
        /// Daemon-assigned client number.
        client_id: u32,
        /// Submission ring capacity.
        sq_entries: u32,
        /// Completion ring capacity.
        cq_entries: u32,
        /// Arena bytes.
        arena_size: u64,
        /// Bytes to map.
        region_size: u64,
    },
    /// Daemon → client: the session is refused, then the socket closes.
    Refused {
        /// A [`refused`] code.
        code: u32,
        /// What went wrong and what to do.
        message: &'a str,
    },
    /// Client → daemon.
    LookupModel {
        /// Model name, e.g. `"resnet152"`.
        name: &'a str,
    },
    /// Daemon → client.
    ModelInfo {
        /// Id to put in [`crate::Request::model_id`].
        id: u32,
        /// Exact input length an untyped request carries: the model's
        /// inputs at batch 1 (see [`crate::tensor`] for when a typed model
        /// takes an untyped request).
        input_bytes: u64,
        /// Output length an untyped request gets: the model's outputs at
        /// batch 1.
        output_bytes: u64,
        /// Standalone execution time on the daemon's device, ns.
        standalone_ns: u64,
        /// Kernels per inference.
        kernels: u32,
        /// The model's name.
        name: &'a str,
        /// Largest batch a typed request may carry (at least 1).
        max_batch: u32,
        /// Its inputs, in order.
        inputs: Tensors<'a>,
        /// Its outputs, in order.
        outputs: Tensors<'a>,
    },
    /// Daemon → client: no model of that name.
    ModelNotFound {
        /// The name asked for.
        name: &'a str,
    },
    /// Client → daemon: one-shot status query (the first page).
    StatusRequest,
    /// Client → daemon: status with the clients whose id is `from_id` or
    /// more, as many as fit in a frame (see the module docs).
    StatusPage {
        /// Smallest client id wanted; 0 for the first page.
        from_id: u32,
    },
    /// Daemon → client: status as a JSON document.
    StatusReply {
        /// JSON text.
        json: &'a str,
    },
    /// Operator → daemon, as the first frame of a one-shot connection:
    /// list, load, unload or re-scan the model repository.
    ModelsCommand {
        /// A [`models_op`] code.
        op: u32,
        /// The model's name (empty for `LIST` and `RESCAN`).
        name: &'a str,
    },
    /// Daemon → operator: the outcome, then the socket closes.
    ModelsReply {
        /// 1 when the command did what it asked, 0 when it failed.
        ok: u32,
        /// A JSON document: the models served, and what changed or why
        /// nothing did.
        json: &'a str,
    },
}

/// A frame could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the frame header or the payload needs.
    Truncated,
    /// The length field is over [`MAX_FRAME`].
    TooLong(u32),
    /// Unknown kind.
    UnknownKind(u16),
    /// A string is not UTF-8 or too long.
    BadString,
    /// Bytes left over after the payload.
    TrailingBytes,
    /// Tensor metadata outside the protocol's bounds (count, rank, name
    /// length, element code, batched byte).
    BadTensor,
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Truncated => f.write_str("control frame truncated"),
            Self::TooLong(n) => write!(f, "control frame of {n} bytes exceeds {MAX_FRAME}"),
            Self::UnknownKind(k) => write!(f, "unknown control message kind {k}"),
            Self::BadString => f.write_str("control message string is not valid UTF-8"),
            Self::TrailingBytes => f.write_str("control frame has trailing bytes"),
            Self::BadTensor => write!(
                f,
                "model tensor metadata out of bounds (at most {} tensors each way, {} dims, \
                 {}-byte names, known element types)",
                crate::tensor::MAX_TENSORS,
                crate::tensor::MAX_DIMS,
                crate::tensor::MAX_TENSOR_NAME
            ),
        }
    }
}

/// The output buffer is too small for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// Bytes the frame needs.
    pub needed: usize,
}

struct Writer<'b> {
    buf: &'b mut [u8],
    pos: usize,
    overflow: bool,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        let end = self.pos + b.len();
        if end <= self.buf.len() {
            self.buf[self.pos..end].copy_from_slice(b);
        } else {
            self.overflow = true;
        }
        self.pos = end;
    }
    fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    fn tensor(&mut self, t: &TensorMeta<'_>) {
        self.str(t.name);
        self.u32(t.elem);
        self.u8(u8::from(t.batched));
        let dims = t.dims();
        self.u8(dims.len() as u8);
        for &d in dims {
            self.u64(d);
        }
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        let n = s.len().min(u16::MAX as usize);
        self.u16(n as u16);
        self.bytes(&s.as_bytes()[..n]);
    }
}

#[derive(Debug, Clone)]
struct Reader<'b> {
    buf: &'b [u8],
    pos: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self) -> Result<&'b str, DecodeError> {
        let n = self.u16()? as usize;
        core::str::from_utf8(self.take(n)?).map_err(|_| DecodeError::BadString)
    }
}

impl<'a> Msg<'a> {
    fn kind(&self) -> u16 {
        match self {
            Self::Hello { .. } => KIND_HELLO,
            Self::Welcome { .. } => KIND_WELCOME,
            Self::Refused { .. } => KIND_REFUSED,
            Self::LookupModel { .. } => KIND_LOOKUP_MODEL,
            Self::ModelInfo { .. } => KIND_MODEL_INFO,
            Self::ModelNotFound { .. } => KIND_MODEL_NOT_FOUND,
            Self::StatusRequest => KIND_STATUS_REQUEST,
            Self::StatusPage { .. } => KIND_STATUS_PAGE,
            Self::StatusReply { .. } => KIND_STATUS_REPLY,
            Self::ModelsCommand { .. } => KIND_MODELS_COMMAND,
            Self::ModelsReply { .. } => KIND_MODELS_REPLY,
        }
    }

    /// Writes the whole frame (header included) into `buf`; returns its length.
    /// A `ModelInfo` whose tensors exceed the decoder's bounds (count, name
    /// length, element code) is not encoded: `BufferTooSmall { needed:
    /// usize::MAX }`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let mut w = Writer {
            buf,
            pos: FRAME_HEADER,
            overflow: false,
        };
        match *self {
            Self::Hello {
                magic,
                version,
                layout_hash,
                pid,
                name,
            } => {
                w.u64(magic);
                w.u32(version);
                w.u64(layout_hash);
                w.u32(pid);
                w.str(name);
            }
            Self::Welcome {
                version,
                client_id,
                sq_entries,
                cq_entries,
                arena_size,
                region_size,
            } => {
                w.u32(version);
                w.u32(client_id);
                w.u32(sq_entries);
                w.u32(cq_entries);
                w.u64(arena_size);
                w.u64(region_size);
            }
            Self::Refused { code, message } => {
                w.u32(code);
                w.str(message);
            }
            Self::LookupModel { name } | Self::ModelNotFound { name } => w.str(name),
            Self::ModelInfo {
                id,
                input_bytes,
                output_bytes,
                standalone_ns,
                kernels,
                name,
                max_batch,
                inputs,
                outputs,
            } => {
                w.u32(id);
                w.u64(input_bytes);
                w.u64(output_bytes);
                w.u64(standalone_ns);
                w.u32(kernels);
                w.str(name);
                w.u32(max_batch);
                // Over the bounds the decoder enforces: refuse to encode
                // what a peer would refuse to decode.
                let in_bounds = |t: TensorMeta<'_>| {
                    t.name.len() <= crate::tensor::MAX_TENSOR_NAME
                        && crate::tensor::elem_size(t.elem).is_some()
                };
                if inputs.len() > crate::tensor::MAX_TENSORS
                    || outputs.len() > crate::tensor::MAX_TENSORS
                    || !inputs.iter().chain(outputs.iter()).all(in_bounds)
                {
                    return Err(BufferTooSmall { needed: usize::MAX });
                }
                w.u16(inputs.len() as u16);
                w.u16(outputs.len() as u16);
                for t in inputs.iter().chain(outputs.iter()) {
                    w.tensor(&t);
                }
            }
            Self::StatusRequest => {}
            Self::StatusPage { from_id } => w.u32(from_id),
            Self::StatusReply { json } => {
                // Never cut: a cut document is invalid JSON. Too long a
                // reply is an error (BufferTooSmall with what it needs).
                w.u32(u32::try_from(json.len()).unwrap_or(u32::MAX));
                w.bytes(json.as_bytes());
            }
            Self::ModelsCommand { op, name } => {
                w.u32(op);
                w.str(name);
            }
            Self::ModelsReply { ok, json } => {
                w.u32(ok);
                w.u32(u32::try_from(json.len()).unwrap_or(u32::MAX));
                w.bytes(json.as_bytes());
            }
        }
        let total = w.pos;
        if w.overflow || total - 4 > MAX_FRAME {
            return Err(BufferTooSmall { needed: total });
        }
        let len = (total - 4) as u32;
        w.buf[0..4].copy_from_slice(&len.to_le_bytes());
        w.buf[4..6].copy_from_slice(&self.kind().to_le_bytes());
        w.buf[6..8].copy_from_slice(&0u16.to_le_bytes());
        Ok(total)
    }

    /// The body length announced by a frame's first four bytes, checked
    /// against [`MAX_FRAME`].
    pub fn body_len(prefix: [u8; 4]) -> Result<usize, DecodeError> {
        let n = u32::from_le_bytes(prefix);
        if n as usize > MAX_FRAME {
            return Err(DecodeError::TooLong(n));
        }
        if (n as usize) < FRAME_HEADER - 4 {
            return Err(DecodeError::Truncated);
        }
        Ok(n as usize)
    }

    /// Decodes a frame body (everything after the 4-byte length).
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader { buf: body, pos: 0 };
        let kind = r.u16()?;
        let _reserved = r.u16()?;
        let msg = match kind {
            KIND_HELLO => Self::Hello {
                magic: r.u64()?,
                version: r.u32()?,
                layout_hash: r.u64()?,
                pid: r.u32()?,
                name: {
                    let s = r.str()?;
                    if s.len() > MAX_NAME {
                        return Err(DecodeError::BadString);
                    }
                    s
                },
            },
            KIND_WELCOME => Self::Welcome {
                version: r.u32()?,
                client_id: r.u32()?,
                sq_entries: r.u32()?,
                cq_entries: r.u32()?,
                arena_size: r.u64()?,
                region_size: r.u64()?,
            },
            KIND_REFUSED => Self::Refused {
                code: r.u32()?,
                message: r.str()?,
            },
            KIND_LOOKUP_MODEL => Self::LookupModel { name: r.str()? },
            KIND_MODEL_INFO => {
                let id = r.u32()?;
                let input_bytes = r.u64()?;
                let output_bytes = r.u64()?;
                let standalone_ns = r.u64()?;
                let kernels = r.u32()?;
                let name = r.str()?;
                let max_batch = r.u32()?;
                let n_in = r.u16()?;
                let n_out = r.u16()?;
                let inputs = read_tensors(&mut r, n_in)?;
                let outputs = read_tensors(&mut r, n_out)?;
                Self::ModelInfo {
                    id,
                    input_bytes,
                    output_bytes,
                    standalone_ns,
                    kernels,
                    name,
                    max_batch,
                    inputs,
                    outputs,
                }
            }
            KIND_MODEL_NOT_FOUND => Self::ModelNotFound { name: r.str()? },
            KIND_STATUS_REQUEST => Self::StatusRequest,
            KIND_STATUS_PAGE => Self::StatusPage { from_id: r.u32()? },
            KIND_STATUS_REPLY => {
                let n = r.u32()? as usize;
                let b = r.take(n)?;
                Self::StatusReply {
                    json: core::str::from_utf8(b).map_err(|_| DecodeError::BadString)?,
                }
            }
            KIND_MODELS_COMMAND => Self::ModelsCommand {
                op: r.u32()?,
                name: r.str()?,
            },
            KIND_MODELS_REPLY => {
                let ok = r.u32()?;
                let n = r.u32()? as usize;
                let b = r.take(n)?;
                Self::ModelsReply {
                    ok,
                    json: core::str::from_utf8(b).map_err(|_| DecodeError::BadString)?,
                }
            }
            k => return Err(DecodeError::UnknownKind(k)),
        };
        if r.pos != body.len() {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(msg)
    }

    /// The version fields of a `Hello` frame body, readable whatever the
    /// rest of the frame holds (for version-mismatch messages).
    pub fn peek_hello_version(body: &[u8]) -> Option<(u64, u32)> {
        let mut r = Reader { buf: body, pos: 0 };
        (r.u16().ok()? == KIND_HELLO).then_some(())?;
        r.u16().ok()?;
        Some((r.u64().ok()?, r.u32().ok()?))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn roundtrip(m: Msg<'_>) {
        let mut buf = [0u8; 512];
        let n = m.encode(&mut buf).unwrap();
        let len = Msg::body_len([buf[0], buf[1], buf[2], buf[3]]).unwrap();
        assert_eq!(len + 4, n);
        assert_eq!(Msg::decode(&buf[4..n]).unwrap(), m);
    }

    #[test]
    fn every_kind_roundtrips() {
        roundtrip(Msg::Hello {
            magic: crate::MAGIC,
            version: 1,
            layout_hash: 7,
            pid: 42,
            name: "rt-client",
        });
        roundtrip(Msg::Welcome {
            version: 1,
            client_id: 3,
            sq_entries: 64,
            cq_entries: 64,
            arena_size: 4096,
            region_size: 20480,
        });
        roundtrip(Msg::Refused {
            code: refused::NOT_ALLOWED,
            message: "uid 1000 not allowed",
        });
        roundtrip(Msg::LookupModel { name: "vgg19" });
        roundtrip(Msg::ModelInfo {
            id: 4,
            input_bytes: 150528,
            output_bytes: 4000,
            standalone_ns: 3_700_000,
            kernels: 71,
            name: "vgg19",
            max_batch: 1,
            inputs: Tensors::List(&[]),
            outputs: Tensors::List(&[]),
        });
        let ins = [
            TensorMeta::new("ids", crate::tensor::ELEM_I64, true, &[1, 128]).unwrap(),
            TensorMeta::new("mask", crate::tensor::ELEM_BOOL, true, &[1, 128]).unwrap(),
        ];
        let outs = [TensorMeta::new("logits", crate::tensor::ELEM_F32, false, &[2]).unwrap()];
        roundtrip(Msg::ModelInfo {
            id: 1,
            input_bytes: 1152,
            output_bytes: 8,
            standalone_ns: 1,
            kernels: 2,
            name: "bert",
            max_batch: 8,
            inputs: Tensors::List(&ins),
            outputs: Tensors::List(&outs),
        });
        roundtrip(Msg::ModelNotFound { name: "nope" });
        roundtrip(Msg::StatusRequest);
        roundtrip(Msg::StatusPage { from_id: 4097 });
        roundtrip(Msg::StatusReply { json: "{\"a\":1}" });
        roundtrip(Msg::ModelsCommand {
            op: models_op::LOAD,
            name: "tiny",
        });
        roundtrip(Msg::ModelsReply {
            ok: 1,
            json: "{\"models\":[]}",
        });
    }

    #[test]
    fn garbage_is_rejected_not_panicked_on() {
        assert_eq!(Msg::decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(
            Msg::decode(&[99, 0, 0, 0]),
            Err(DecodeError::UnknownKind(99))
        );
        assert_eq!(
            Msg::body_len(u32::MAX.to_le_bytes()),
            Err(DecodeError::TooLong(u32::MAX))
        );
        let mut buf = [0u8; 64];
        let n = Msg::LookupModel { name: "abc" }.encode(&mut buf).unwrap();
        assert_eq!(Msg::decode(&buf[4..n - 1]), Err(DecodeError::Truncated));
        buf[n] = 1;
        assert_eq!(Msg::decode(&buf[4..n + 1]), Err(DecodeError::TrailingBytes));
        // Every prefix and every single-byte corruption decodes or errors.
        let n = Msg::Hello {
            magic: 1,
            version: 2,
            layout_hash: 3,
            pid: 4,
            name: "x",
        }
        .encode(&mut buf)
        .unwrap();
        for cut in 0..n {
            let _ = Msg::decode(&buf[4..cut.max(4)]);
        }
        for i in 4..n {
            let mut b = buf;
            b[i] ^= 0xff;
            let _ = Msg::decode(&b[4..n]);
        }
    }

    #[test]
    fn small_buffer_is_reported() {
        let mut buf = [0u8; 8];
        let e = Msg::LookupModel { name: "resnet152" }
            .encode(&mut buf)
            .unwrap_err();
        assert_eq!(e.needed, 8 + 2 + 9);
    }

    #[test]
    fn a_status_reply_over_the_frame_limit_is_an_error_not_cut() {
        let json = format!("[{}1]", "1,".repeat(MAX_FRAME / 2));
        let mut buf = vec![0u8; MAX_FRAME + 64];
        let e = Msg::StatusReply { json: &json }
            .encode(&mut buf)
            .unwrap_err();
        assert!(e.needed > MAX_FRAME, "{e:?}");
        // At the budget it fits and round-trips whole.
        let json = "x".repeat(STATUS_PAGE_BUDGET);
        let n = Msg::StatusReply { json: &json }.encode(&mut buf).unwrap();
        assert_eq!(
            Msg::decode(&buf[4..n]),
            Ok(Msg::StatusReply { json: &json })
        );
    }

    #[test]
    fn a_long_model_name_encodes_whole() {
        // Names up to u16::MAX bytes fit a frame; the daemon echoes them in
        // ModelNotFound.
        let name = "m".repeat(usize::from(u16::MAX));
        let mut buf = vec![0u8; FRAME_HEADER + 2 + name.len()];
        let n = Msg::ModelNotFound { name: &name }.encode(&mut buf).unwrap();
        assert_eq!(
            Msg::decode(&buf[4..n]),
            Ok(Msg::ModelNotFound { name: &name })
        );
    }

    fn model_info_frame(ins: &[TensorMeta<'_>], outs: &[TensorMeta<'_>]) -> Vec<u8> {
        let mut buf = vec![0u8; MAX_FRAME + 4];
        let n = Msg::ModelInfo {
            id: 1,
            input_bytes: 0,
            output_bytes: 0,
            standalone_ns: 0,
            kernels: 0,
            name: "m",
            max_batch: 4,
            inputs: Tensors::List(ins),
            outputs: Tensors::List(outs),
        }
        .encode(&mut buf)
        .unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn decoded_tensors_read_back_in_order() {
        let ins = [
            TensorMeta::new("a", crate::tensor::ELEM_F32, true, &[1, 3, 4, 4]).unwrap(),
            TensorMeta::new("b", crate::tensor::ELEM_I32, false, &[]).unwrap(),
        ];
        let outs = [TensorMeta::new("y", crate::tensor::ELEM_F16, true, &[1, 10]).unwrap()];
        let f = model_info_frame(&ins, &outs);
        let Ok(Msg::ModelInfo {
            inputs, outputs, ..
        }) = Msg::decode(&f[4..])
        else {
            panic!("{:?}", Msg::decode(&f[4..]));
        };
        let got: Vec<_> = inputs.iter().collect();
        assert_eq!(got, ins);
        assert_eq!(got[0].dims(), &[1, 3, 4, 4]);
        assert_eq!(got[1].dims(), &[] as &[u64]);
        assert_eq!(outputs.iter().next().unwrap().name, "y");
        assert_eq!(outputs.len(), 1);
    }

    #[test]
    fn the_largest_model_info_fits_a_frame() {
        let name = "n".repeat(crate::tensor::MAX_TENSOR_NAME);
        let t = TensorMeta::new(
            &name,
            crate::tensor::ELEM_F32,
            true,
            &[7; crate::tensor::MAX_DIMS],
        )
        .unwrap();
        let all = [t; crate::tensor::MAX_TENSORS];
        let model = "m".repeat(usize::from(u16::MAX));
        let mut buf = vec![0u8; MAX_FRAME + 4];
        let n = Msg::ModelInfo {
            id: 1,
            input_bytes: 0,
            output_bytes: 0,
            standalone_ns: 0,
            kernels: 0,
            name: &model,
            max_batch: 4,
            inputs: Tensors::List(&all),
            outputs: Tensors::List(&all),
        }
        .encode(&mut buf)
        .unwrap();
        assert_eq!(n - 4, MAX_MODEL_INFO);
        assert!(Msg::decode(&buf[4..n]).is_ok());
        // One tensor more is refused at encode, not sent.
        let more = [t; crate::tensor::MAX_TENSORS + 1];
        let e = Msg::ModelInfo {
            id: 1,
            input_bytes: 0,
            output_bytes: 0,
            standalone_ns: 0,
            kernels: 0,
            name: "m",
            max_batch: 4,
            inputs: Tensors::List(&more),
            outputs: Tensors::List(&[]),
        }
        .encode(&mut buf);
        assert!(e.is_err());
    }

    #[test]
    fn out_of_bounds_tensor_metadata_is_refused() {
        let ok = TensorMeta::new("x", crate::tensor::ELEM_U8, false, &[4]).unwrap();
        assert!(TensorMeta::new("x", 99, false, &[4]).is_none());
        assert!(TensorMeta::new("x", 0, false, &[1; crate::tensor::MAX_DIMS + 1]).is_none());
        let long = "x".repeat(crate::tensor::MAX_TENSOR_NAME + 1);
        assert!(TensorMeta::new(&long, 0, false, &[1]).is_none());
        let f = model_info_frame(&[ok], &[ok]);
        // Offsets into the body: kind+reserved 4, fixed fields 32, name 2+1,
        // max_batch 4, counts 2+2; then the first tensor: name 2+1, elem 4,
        // batched 1, rank 1.
        let counts = 4 + 32 + 3 + 4;
        let first = counts + 4;
        let body = &f[4..];
        let patch = |at: usize, bytes: &[u8]| {
            let mut b = body.to_vec();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            Msg::decode(&b).map(|_| ())
        };
        assert_eq!(
            patch(counts, &65u16.to_le_bytes()),
            Err(DecodeError::BadTensor)
        );
        assert_eq!(
            patch(first + 3, &7u32.to_le_bytes()),
            Err(DecodeError::BadTensor)
        );
        assert_eq!(patch(first + 7, &[2]), Err(DecodeError::BadTensor));
        assert_eq!(patch(first + 8, &[9]), Err(DecodeError::BadTensor));
        assert_eq!(
            patch(first, &200u16.to_le_bytes()),
            Err(DecodeError::Truncated)
        );
        assert!(patch(first + 7, &[1]).is_ok());
    }

    proptest::proptest! {
        // Under Miri (scripts/test-all.sh) a case takes seconds: a few show
        // the code is free of undefined behaviour; the native run does 256.
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if cfg!(miri) { 4 } else { 256 },
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Random bytes never make the decoder panic; what it accepts
        /// re-encodes to the same bytes.
        #[test]
        fn decoding_random_bytes_never_panics(
            kind in 0u16..12,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
        ) {
            let mut b = kind.to_le_bytes().to_vec();
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&body);
            if let Ok(m) = Msg::decode(&b) {
                let mut out = vec![0u8; b.len() + 16];
                let n = m.encode(&mut out).unwrap();
                proptest::prop_assert_eq!(&out[4..n], &b[..]);
            }
        }

        /// A valid ModelInfo with random corruption decodes or errors.
        #[test]
        fn corrupted_model_info_never_panics(
            at in 0usize..200, byte in proptest::prelude::any::<u8>(), cut in 0usize..200,
        ) {
            let ins = [
                TensorMeta::new("ids", crate::tensor::ELEM_I64, true, &[1, 128]).unwrap(),
                TensorMeta::new("m", crate::tensor::ELEM_BOOL, false, &[3]).unwrap(),
            ];
            let f = model_info_frame(&ins, &ins[..1]);
            let mut b = f[4..].to_vec();
            let at = at % b.len();
            b[at] = byte;
            let _ = Msg::decode(&b);
            let _ = Msg::decode(&b[..cut.min(b.len())]);
            if let Ok(Msg::ModelInfo { inputs, outputs, .. }) = Msg::decode(&b) {
                proptest::prop_assert!(inputs.len() <= crate::tensor::MAX_TENSORS);
                proptest::prop_assert_eq!(inputs.iter().count(), inputs.len());
                proptest::prop_assert_eq!(outputs.iter().count(), outputs.len());
            }
        }
    }

    #[test]
    fn hello_version_peek() {
        let mut buf = [0u8; 64];
        let n = Msg::Hello {
            magic: 5,
            version: 9,
            layout_hash: 0,
            pid: 0,
            name: "",
        }
        .encode(&mut buf)
        .unwrap();
        assert_eq!(Msg::peek_hello_version(&buf[4..n]), Some((5, 9)));
    }
}
