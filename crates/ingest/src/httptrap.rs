//! httptrap JSON (Circonus broker / IRONdb compatible): concatenated documents with comments,
//! nested objects and arrays flattened with a backtick, plain values typed by their form, and
//! the explicit `{_type, _value, _ts, _fl, _tags}` form. Mapping rules: `FORMAT.md`.

use std::borrow::Cow;
use std::cell::Cell;

use hist::{Bin, Histogram};

use crate::batch::{
    check_name, check_tag_count, Batch, Mode, Options, Reason, TagList, Tags, SAMPLES_PER_BATCH_MAX,
};
use crate::bins::{bin_key, KeyedBins};
use crate::json::{self, DocumentError, Kind, Token, Tokenizer};
use crate::sink::{
    HistogramRef, Lookup, Name, Point, RawSeries, Scope, Series, Sink, TagsRef, ValueRef,
};
use crate::tags::{parse_tag, split_stream_tags, suffix_tags_owned, PlainSuffix, SuffixMemo};

/// Tokens reserved up front for one body (16 bytes each); larger tapes grow as needed.
const TAPE_RESERVE_TOKENS_MAX: usize = 1 << 20;

/// Joins the keys of nested objects and the indices of arrays into one metric name.
pub const FLATTEN_DELIMITER: char = '`';

/// Parses a whole httptrap body. Keys that cannot be accepted are rejected one by one and the
/// rest of their document is kept; a JSON syntax error rejects the rest of the body.
pub fn parse(input: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    // Histograms are built for the batch anyway: bin lists are read as keys and counts, not
    // packed first (packing pays where bins are lent to a store).
    let mut scratch = Scratch::one_body();
    scratch.bins.pack = false;
    parse_into_with(input, options, &mut batch, &mut scratch);
    batch
}

/// Reads an httptrap body into `sink`, with every check and rejection of [`parse`] (which is
/// this into the owned batch). Names are lent from the walk's path, tag lists once per list of
/// `|ST[…]` tags above the values, a value's own key suffix unsplit (with the metric's name as
/// its raw series bytes) when no other tags join it, text from the body when it has no
/// escapes, and `"H[…]=n"` bin arrays packed as the tokenizer read them. At most
/// `SAMPLES_PER_BATCH_MAX` metrics are handed over; the one after rejects the rest of the body.
pub fn parse_into<S: Sink>(input: &[u8], options: &Options, sink: &mut S) {
    parse_into_with(input, options, sink, &mut Scratch::one_body());
}

/// The buffers reading a body needs (the token tape, the bin vectors), for a caller that reads
/// many bodies and keeps them from one to the next: grown and faulted in once, not per body.
pub struct Scratch {
    tape: Vec<Token>,
    bins: KeyedBins,
    /// Boxed: the walk takes them out of their cells and puts them back for every sample, a
    /// pointer moved instead of the whole struct.
    walk_bins: Option<Box<KeyedBins>>,
    decoded_bins: Option<Box<KeyedBins>>,
    /// Member keys' suffix splits, remembered from body to body.
    suffixes: SuffixMemo,
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            tape: Vec::new(),
            bins: KeyedBins::default(),
            walk_bins: None,
            decoded_bins: None,
            suffixes: crate::tags::suffix_memo(),
        }
    }
}

impl Scratch {
    /// Buffers for one body: no key is seen again, so none is remembered.
    fn one_body() -> Scratch {
        Scratch {
            suffixes: SuffixMemo::off(crate::tags::LIMITS),
            ..Scratch::default()
        }
    }

    /// Bytes the buffers have allocated, for a caller bounding what it keeps between bodies.
    pub fn capacity_bytes(&self) -> usize {
        self.tape.capacity() * std::mem::size_of::<Token>()
            + self.bins.capacity_bytes()
            + self.walk_bins.as_ref().map_or(0, |b| b.capacity_bytes())
            + self.decoded_bins.as_ref().map_or(0, |b| b.capacity_bytes())
            + self.suffixes.capacity_bytes()
    }
}

/// [`parse_into`] with the caller's buffers.
pub fn parse_into_with<S: Sink>(
    input: &[u8],
    options: &Options,
    sink: &mut S,
    scratch: &mut Scratch,
) {
    if input.len() > json::BODY_BYTES_MAX {
        let reason = Reason::Bound {
            what: "httptrap JSON body bytes",
            size: input.len(),
            max: json::BODY_BYTES_MAX,
        };
        sink.reject(&|| "body".to_owned(), reason, Scope::Whole);
        return;
    }
    let mut tokenizer = Tokenizer::with_bins(input, std::mem::take(&mut scratch.bins));
    // One token per 32 body bytes up front (numeric documents have about one per 8, histogram
    // bin arrays two per array): fewer regrowth copies on large documents, without faulting in
    // pages for a tape that bin arrays leave mostly empty.
    let mut tape = std::mem::take(&mut scratch.tape);
    tape.clear();
    tape.reserve((input.len() / 32).min(TAPE_RESERVE_TOKENS_MAX));
    let bins = Cell::new(scratch.walk_bins.take());
    let decoded = Cell::new(scratch.decoded_bins.take());
    let (mut document, mut accepted) = (0, 0);
    // Validating the whole body once (the common case: it is all UTF-8) lets token texts be
    // plain slices instead of a UTF-8 check per token.
    let text = simdutf8::basic::from_utf8(input).ok();
    while let Some(result) = tokenizer.next_document(&mut tape) {
        sink.document(document, 0);
        document += 1;
        match result {
            Err(e) => {
                let location =
                    || format!("document {document}, {}", position_text(input, e.position));
                let reason = Reason::Syntax {
                    expected: e.expected,
                };
                sink.reject(&location, reason, Scope::Rest);
                break;
            }
            Ok(Err(e)) => reject_document(sink, input, document, e),
            Ok(Ok(())) => {
                let mut walker = Walker {
                    input,
                    text,
                    tape: &tape,
                    options,
                    document,
                    sink: &mut *sink,
                    accepted,
                    path: String::new(),
                    key_tags: KeyTags::default(),
                    suffix: None,
                    bins: &bins,
                    decoded: &decoded,
                    read_bins: &tokenizer.bins,
                    suffixes: &mut scratch.suffixes,
                };
                let go_on = walker.members(0);
                accepted = walker.accepted;
                if !go_on {
                    break;
                }
            }
        }
    }
    debug_assert!(tokenizer.position() <= input.len());
    scratch.tape = tape;
    scratch.bins = tokenizer.into_bins();
    scratch.walk_bins = bins.take();
    scratch.decoded_bins = decoded.take();
}

fn reject_document(sink: &mut impl Sink, input: &[u8], document: usize, e: DocumentError) {
    let (position, reason) = match e {
        DocumentError::InvalidUtf8 { position } => (position, Reason::InvalidUtf8),
        DocumentError::TooDeep { position } => (
            position,
            Reason::Bound {
                what: "JSON nesting depth",
                size: crate::batch::JSON_DEPTH_MAX + 1,
                max: crate::batch::JSON_DEPTH_MAX,
            },
        ),
    };
    let location = || format!("document {document}, {}", position_text(input, position));
    sink.reject(&location, reason, Scope::One);
}

fn position_text(input: &[u8], position: usize) -> String {
    let (line, column) = json::line_column(input, position);
    format!("line {line}, column {column} (byte {position})")
}

/// Walks one document's tape, building names from the path of keys.
struct Walker<'a, 'b, S> {
    input: &'a [u8],
    /// `input` as text when all of it is UTF-8.
    text: Option<&'a str>,
    tape: &'b [Token],
    options: &'b Options,
    document: usize,
    sink: &'b mut S,
    /// Metrics handed to the sink in this body so far, against `SAMPLES_PER_BATCH_MAX`.
    accepted: usize,
    /// The flattened name of the value being visited, without `|ST[…]` suffixes.
    path: String,
    /// The stream tags of the keys on the way to the value being visited.
    key_tags: KeyTags,
    /// The plain `|ST[…]` suffix of the value's own key while no key above it has tags: lent
    /// to the sink as it is, or moved into `key_tags` when the value turns out to hold
    /// other values or carries `_tags`.
    suffix: Option<PlainSuffix<'a>>,
    /// The bins of the histogram being read, kept between histograms (and documents) so that
    /// each `_value` array does not allocate its own; a `Cell` as the walk borrows `self` shared.
    bins: &'b Cell<Option<Box<KeyedBins>>>,
    /// The bins of a base64 `_value` decoded in place, lent to the sink as they are; kept
    /// between histograms like `bins`.
    decoded: &'b Cell<Option<Box<KeyedBins>>>,
    /// The bins the tokenizer read for this document's `Bins` arrays.
    read_bins: &'b KeyedBins,
    /// Member keys' suffix splits, remembered (the caller's, kept between bodies).
    suffixes: &'b mut SuffixMemo,
}

/// The `|ST[…]` tags of the keys above the value being visited, and the shared list that
/// values carry, made once per change of them.
#[derive(Default)]
struct KeyTags {
    list: TagList,
    /// Changes whenever `list` does, so that `shared` knows when it is current; the `tags_id`
    /// of the values under it. Only grows, so an id never comes back within the document.
    generation: u64,
    /// `list` as the shared list values carry, and the generation it was made at.
    shared: Option<(u64, Tags)>,
    /// True when the strings of `list` were moved into `shared` (whose first `list.len()`
    /// entries then hold them; `list` holds empty placeholders): the common leaf key's tags are
    /// then allocated once, not parsed and cloned. `restore` undoes it before anything reads or
    /// extends `list`.
    moved: bool,
}

impl KeyTags {
    /// Puts the strings moved into `shared` back into `list` (see `moved`).
    fn restore(&mut self) {
        restore_moved(&mut self.list, &mut self.moved, &self.shared);
    }

    /// A `tags_id` of its own for a value with `_tags`. `list` stays what it was, and so does
    /// `shared` if current, under the next generation: later values keep sharing it.
    fn own_id(&mut self) -> u64 {
        let id = self.generation + 1;
        let next = self.generation + 2;
        if let Some((made_at, _)) = &mut self.shared {
            if *made_at == self.generation {
                *made_at = next;
            }
        }
        self.generation = next;
        id
    }

    /// The list as values carry it, made if it changed since the last value.
    fn shared(&mut self) -> &Tags {
        let generation = self.generation;
        if self
            .shared
            .as_ref()
            .is_some_and(|(made_at, _)| *made_at != generation)
        {
            self.restore();
            self.shared = None;
        }
        // The values of one object share the tags of the keys above them.
        let (list, moved) = (&mut self.list, &mut self.moved);
        let (_, tags) = self.shared.get_or_insert_with(|| {
            *moved = true;
            (generation, list.iter_mut().map(std::mem::take).collect())
        });
        tags
    }
}

/// `KeyTags::restore`, on its fields.
fn restore_moved(list: &mut TagList, moved: &mut bool, shared: &Option<(u64, Tags)>) {
    if !std::mem::take(moved) {
        return;
    }
    if let Some((_, shared)) = shared {
        debug_assert!(shared.len() >= list.len());
        for (slot, pair) in list.iter_mut().zip(shared.iter()) {
            slot.clone_from(pair);
        }
    }
}

/// A value as the walk finds it: text and histogram bins still borrowed where they can be.
enum Found<'v> {
    Null,
    Numeric(f64),
    Text(Cow<'v, str>),
    Histogram(HistogramRef<'v>),
    CumulativeHistogram(HistogramRef<'v>),
}

/// The special keys of the explicit form, as tape indices of their values (last one wins).
#[derive(Default)]
struct Explicit {
    kind: Option<usize>,
    value: Option<usize>,
    ts: Option<usize>,
    fl: Option<usize>,
    tags: Option<usize>,
}

impl<'a: 'b, 'b, S: Sink> Walker<'a, 'b, S> {
    /// Visits each member of the object at `index`; false once the batch is full.
    fn members(&mut self, index: usize) -> bool {
        self.suffix_into_key_tags();
        let mut child = index + 1;
        while child < self.tape[index].next() {
            let key = child;
            let value = key + 1;
            child = self.tape[value].next();
            let Some(key) = self.string(key) else {
                self.reject_here(Reason::bad_value("a valid \\u escape in a key", ""));
                continue;
            };
            let (keep, keep_tags) = (self.path.len(), self.key_tags.list.len());
            if keep > 0 {
                self.path.push(FLATTEN_DELIMITER);
            }
            // A `|ST[…]` suffix may end any key; its tags apply to everything under it.
            self.key_tags.restore();
            let plain = match &key {
                Cow::Borrowed(key) if self.key_tags.list.is_empty() => {
                    self.suffixes.plain_suffix(key)
                }
                _ => None,
            };
            let go_on = if let Some(plain) = plain {
                self.path.push_str(plain.name);
                self.suffix = Some(plain);
                let go_on = self.value(value);
                self.suffix = None;
                go_on
            } else {
                self.key_tags_split(&key, value)
            };
            self.path.truncate(keep);
            if self.key_tags.list.len() != keep_tags {
                self.key_tags.list.truncate(keep_tags);
                self.key_tags.generation += 1;
            }
            if !go_on {
                return false;
            }
        }
        true
    }

    /// The member `key` (its suffix's tags split into `key_tags`) and its value at `value`.
    fn key_tags_split(&mut self, key: &str, value: usize) -> bool {
        let keep_tags = self.key_tags.list.len();
        match split_stream_tags(key, &mut self.key_tags.list) {
            Ok(name) => {
                if self.key_tags.list.len() != keep_tags {
                    self.key_tags.generation += 1;
                }
                self.path.push_str(name);
                self.value(value)
            }
            Err(reason) => {
                self.path.push_str(key);
                self.reject_here(reason)
            }
        }
    }

    /// Moves a lent suffix's tags into `key_tags`: the value under that key holds other values
    /// (which carry them as the list), or has `_tags` to join them. The member's walk truncates
    /// the list again.
    fn suffix_into_key_tags(&mut self) {
        if let Some(plain) = self.suffix.take() {
            self.key_tags.restore();
            self.key_tags.list.extend(suffix_tags_owned(plain.text));
            self.key_tags.generation += 1;
        }
    }

    fn value(&mut self, index: usize) -> bool {
        let token = self.tape[index];
        match token.kind {
            Kind::Object => match self.explicit_keys(index) {
                Some(explicit) => self.explicit(explicit),
                None => self.members(index),
            },
            Kind::Array => self.elements(index),
            // Only an explicit-form object holds a `Bins` array, and `explicit` reads it.
            Kind::Bins | Kind::PackedBins | Kind::BinRange => {
                self.reject_here(Reason::bad_value("a value", self.raw(index)))
            }
            _ => match self.plain(index) {
                Ok(value) => self.emit(value, None, Mode::Set, None),
                Err(reason) => self.reject_here(reason),
            },
        }
    }

    fn elements(&mut self, index: usize) -> bool {
        self.suffix_into_key_tags();
        let mut child = index + 1;
        let mut position = 0usize;
        while child < self.tape[index].next() {
            let keep = self.path.len();
            self.path.push(FLATTEN_DELIMITER);
            self.path.push_str(&position.to_string());
            let go_on = self.value(child);
            self.path.truncate(keep);
            if !go_on {
                return false;
            }
            child = self.tape[child].next();
            position += 1;
        }
        true
    }

    /// The special keys if the object is in the explicit form (it has `_type` or `_value`).
    fn explicit_keys(&self, index: usize) -> Option<Explicit> {
        let mut explicit = Explicit::default();
        let mut other = false;
        let mut child = index + 1;
        while child < self.tape[index].next() {
            // The key's raw bytes (escapes not resolved, as before): no UTF-8 boundary checks.
            let token = self.tape[child];
            let slot = match self.input.get(token.start()..token.end()).unwrap_or(&[]) {
                b"_type" => &mut explicit.kind,
                b"_value" => &mut explicit.value,
                b"_ts" => &mut explicit.ts,
                b"_fl" => &mut explicit.fl,
                b"_tags" => &mut explicit.tags,
                _ => {
                    other = true;
                    child = self.tape[child + 1].next();
                    continue;
                }
            };
            *slot = Some(child + 1);
            child = self.tape[child + 1].next();
        }
        let is_explicit = explicit.kind.is_some() || explicit.value.is_some();
        // Other keys beside `_type`/`_value` make it a plain object whose `_…` keys are names;
        // `explicit()` rejects that mix instead, so mark it with `kind: None, value: None`.
        if is_explicit && other {
            return Some(Explicit::default());
        }
        is_explicit.then_some(explicit)
    }

    fn explicit(&mut self, explicit: Explicit) -> bool {
        // Taken out of its cell for the sample's life: the value may borrow it (a base64
        // histogram decoded into it) while `emit` borrows `self`.
        let mut decoded = self.decoded.take().unwrap_or_default();
        let go_on = match self.explicit_sample(&explicit, &mut decoded) {
            Ok((value, ts_ms, mode, tags)) => self.emit(value, ts_ms, mode, Some(tags)),
            Err(reason) => self.reject_here(reason),
        };
        self.decoded.set(Some(decoded));
        go_on
    }

    fn explicit_sample<'s>(
        &self,
        e: &Explicit,
        decoded: &'s mut KeyedBins,
    ) -> Result<(Found<'s>, Option<i64>, Mode, TagList), Reason>
    where
        'b: 's,
    {
        let (Some(kind), Some(value)) = (e.kind, e.value) else {
            return Err(Reason::Syntax {
                expected: "both `_type` and `_value`, and no other keys but `_ts` `_fl` `_tags`",
            });
        };
        let kind = self
            .string(kind)
            .ok_or_else(|| Reason::bad_value("a `_type` string", ""))?;
        let value = self.typed_value(&kind, value, decoded)?;
        let ts_ms = e.ts.map(|i| self.timestamp(i)).transpose()?;
        let mode = e.fl.map_or(Ok(Mode::Set), |i| self.mode(i))?;
        let tags = e.tags.map_or(Ok(Vec::new()), |i| self.tag_list(i))?;
        Ok((value, ts_ms, mode, tags))
    }

    fn typed_value<'s>(
        &self,
        kind: &str,
        index: usize,
        decoded: &'s mut KeyedBins,
    ) -> Result<Found<'s>, Reason>
    where
        'b: 's,
    {
        if self.tape[index].kind == Kind::Null {
            return Ok(Found::Null);
        }
        match kind {
            "i" | "I" | "l" | "L" | "n" => self.numeric_mean(kind, index).map(Found::Numeric),
            "s" => self.text_value(index),
            "h" => self.histogram(index, decoded).map(Found::Histogram),
            "H" => self
                .histogram(index, decoded)
                .map(Found::CumulativeHistogram),
            other => Err(Reason::BadType {
                found: crate::batch::excerpt(other),
            }),
        }
    }

    /// A numeric `_value`: one value, or the mean of an array of them.
    fn numeric_mean(&self, kind: &str, index: usize) -> Result<f64, Reason> {
        if self.tape[index].kind == Kind::Bins {
            // `H[..]=n` strings are no numbers: the first one is the error, as token by token.
            let array = self.raw(index);
            let first = array.get(2..).and_then(|rest| rest.split('"').next());
            return numeric_text(kind, first.unwrap_or(""));
        }
        if self.tape[index].kind != Kind::Array {
            return self.numeric(kind, index);
        }
        let (mut sum, mut count) = (0.0, 0u32);
        let mut child = index + 1;
        while child < self.tape[index].next() {
            sum += self.numeric(kind, child)?;
            count += 1;
            child = self.tape[child].next();
        }
        if count == 0 {
            return Err(Reason::bad_value("at least one value", "[]"));
        }
        Ok(sum / f64::from(count))
    }

    /// One number (or numeric string) read as `_type` `kind` requires.
    fn numeric(&self, kind: &str, index: usize) -> Result<f64, Reason> {
        let text = match self.tape[index].kind {
            Kind::Number { .. } => Cow::Borrowed(self.raw(index)),
            Kind::String { .. } => self.string(index).ok_or(Reason::InvalidUtf8)?,
            _ => return Err(Reason::bad_value("a number", self.raw(index))),
        };
        numeric_text(kind, text.as_ref())
    }

    fn text_value(&self, index: usize) -> Result<Found<'b>, Reason> {
        match self.tape[index].kind {
            Kind::String { .. } => {
                let text = self.string(index).ok_or(Reason::InvalidUtf8)?;
                Ok(Found::Text(text))
            }
            Kind::Number { .. } | Kind::True | Kind::False => {
                Ok(Found::Text(Cow::Borrowed(self.raw(index))))
            }
            _ => Err(Reason::bad_value("one text value", self.raw(index))),
        }
    }

    /// A histogram `_value`: one element or an array of them, merged. An array of `"H[…]=n"`
    /// strings the tokenizer read is lent as it packed them when in storage order. Other single
    /// bins are collected and sorted once (uploads list them in order, so the sort is a scan);
    /// base64 parts merge.
    fn histogram<'s>(
        &self,
        index: usize,
        decoded: &'s mut KeyedBins,
    ) -> Result<HistogramRef<'s>, Reason>
    where
        'b: 's,
    {
        let token = self.tape[index];
        if token.kind == (Kind::String { escaped: false })
            && self.is_base64_histogram(index, decoded)
        {
            // One base64 histogram (Circonus' form for `h` with `_ts`): its bins, lent.
            return Ok(HistogramRef::Sorted {
                keys: &decoded.keys,
                counts: &decoded.counts,
            });
        }
        if token.kind == Kind::Bins {
            // Read by the tokenizer: packed, or out of order in the range the next token holds.
            let Some(&read) = self.tape.get(index + 1) else {
                debug_assert!(false, "a `Bins` token is followed by its bins'");
                return Ok(HistogramRef::Built(Histogram::new()));
            };
            if read.kind == Kind::PackedBins {
                if let Some(packed) = self.read_bins.packed.get(read.start()) {
                    return Ok(HistogramRef::Packed(packed));
                }
                debug_assert!(false, "a histogram the tokenizer packed");
            }
            let mut scratch = self.bins.take().unwrap_or_default();
            let range = read.start()..read.end();
            let histogram = crate::bins::histogram_of(self.read_bins, range, &mut scratch);
            self.bins.set(Some(scratch));
            return Ok(histogram);
        }
        // The array's token count bounds its element count: one allocation for the bins.
        let elements_max = token.next() - index;
        let mut bins = self.bins.take().unwrap_or_default();
        bins.clear();
        bins.keys.reserve(elements_max);
        bins.counts.reserve(elements_max);
        let mut parts = HistogramParts { bins, merged: None };
        if token.kind != Kind::Array {
            self.histogram_element(index, &mut parts)?;
        } else {
            let mut child = index + 1;
            while child < self.tape[index].next() {
                self.histogram_element(child, &mut parts)?;
                child = self.tape[child].next();
            }
        }
        let histogram = parts.finish();
        self.bins.set(Some(parts.bins));
        Ok(HistogramRef::Built(histogram))
    }

    /// Whether the unescaped string `index` is a base64 histogram, decoded into `decoded`'s
    /// keys and counts: what `histogram_element` makes of a lone string that is no bin entry
    /// and no number, without a histogram allocated per value.
    fn is_base64_histogram(&self, index: usize, decoded: &mut KeyedBins) -> bool {
        let text = self.raw(index);
        if text.starts_with("H[") || json::whole_number(text.as_bytes()).is_some() {
            return false;
        }
        let KeyedBins {
            keys,
            counts,
            bytes,
            ..
        } = decoded;
        Histogram::decode_base64_into(text.as_bytes(), bytes, keys, counts).is_ok()
    }

    /// Adds one element: a number (one sample), `H[<float>]=<count>` (or the C text form), or a
    /// base64 llhist.
    #[inline]
    fn histogram_element(&self, index: usize, parts: &mut HistogramParts) -> Result<(), Reason> {
        let token = self.tape[index];
        // The common element: an unescaped `H[d.de±dd]=n` string, read from the input bytes in
        // place (no `Cow`, no UTF-8 boundary checks) by a reader of that one fixed shape.
        if token.kind == (Kind::String { escaped: false }) {
            if let Some((key, count)) = self
                .input
                .get(token.start()..token.end())
                .and_then(fixed_entry)
            {
                parts.bins.push(key, count);
                return Ok(());
            }
        }
        self.histogram_element_other(index, parts)
    }

    /// Every other element form; kept out of line so the common path above stays small.
    #[inline(never)]
    fn histogram_element_other(
        &self,
        index: usize,
        parts: &mut HistogramParts,
    ) -> Result<(), Reason> {
        let text = match self.tape[index].kind {
            Kind::Number { .. } => {
                let value = json_number(self.raw(index))?;
                parts.bins.push(Bin::from_f64(value).key(), 1);
                return Ok(());
            }
            // The common element: an `H[..]=n` string without escapes, read in place.
            Kind::String { escaped: false } => Cow::Borrowed(self.raw(index)),
            Kind::String { .. } => self.string(index).ok_or(Reason::InvalidUtf8)?,
            _ => return Err(Reason::bad_value("a histogram element", self.raw(index))),
        };
        let text = text.as_ref();
        if let Some((bin, count)) = emitted_entry(text) {
            parts.bins.push(bin.key(), count);
        } else if json::whole_number(text.as_bytes()).is_some() {
            parts.bins.push(Bin::from_f64(json_number(text)?).key(), 1);
        } else if text.starts_with("H[") {
            let (bin, count) = hist::parse_entry(text)
                .map_err(|_| Reason::bad_value("H[<float>]=<count>", text))?;
            parts.bins.push(bin.key(), count);
        } else if let Ok(decoded) = Histogram::from_base64(text) {
            parts.merge(decoded);
        } else {
            let (bin, count) = hist::parse_entry(text).map_err(|_| {
                Reason::bad_value("a number, H[<float>]=<count> or a base64 histogram", text)
            })?;
            parts.bins.push(bin.key(), count);
        }
        Ok(())
    }

    /// `_ts`: integer milliseconds, as a number or a string.
    fn timestamp(&self, index: usize) -> Result<i64, Reason> {
        let text = match self.tape[index].kind {
            Kind::Number { integer: true } => Cow::Borrowed(self.raw(index)),
            Kind::String { .. } => self.string(index).ok_or(Reason::InvalidUtf8)?,
            _ => return Err(Reason::bad_value("integer ms in `_ts`", self.raw(index))),
        };
        let ts_ms = text
            .parse::<i64>()
            .map_err(|_| Reason::bad_value("integer ms in `_ts`", &text))?;
        self.options.check_ts(ts_ms)
    }

    fn mode(&self, index: usize) -> Result<Mode, Reason> {
        match self.string(index).as_deref() {
            Some("+") => Ok(Mode::Accumulate),
            Some("~") => Ok(Mode::Average),
            _ => Err(Reason::bad_value("`_fl` \"+\" or \"~\"", self.raw(index))),
        }
    }

    fn tag_list(&self, index: usize) -> Result<TagList, Reason> {
        if self.tape[index].kind != Kind::Array {
            return Err(Reason::bad_value("`_tags` as an array", self.raw(index)));
        }
        let mut tags = Vec::new();
        let mut child = index + 1;
        while child < self.tape[index].next() {
            let text = match self.tape[child].kind {
                Kind::String { .. } => self.string(child).ok_or(Reason::InvalidUtf8)?,
                _ => return Err(Reason::bad_value("a \"cat:val\" string", self.raw(child))),
            };
            tags.push(parse_tag(&text)?);
            check_tag_count(tags.len())?;
            child = self.tape[child].next();
        }
        Ok(tags)
    }

    /// A plain value typed by its JSON form.
    fn plain(&self, index: usize) -> Result<Found<'b>, Reason> {
        match self.tape[index].kind {
            Kind::Number { integer } => plain_number(self.raw(index), integer).map(Found::Numeric),
            Kind::String { .. } => {
                let text = self.string(index).ok_or(Reason::InvalidUtf8)?;
                match json::whole_number(text.as_bytes()) {
                    Some(integer) => plain_number(&text, integer).map(Found::Numeric),
                    None => Ok(Found::Text(text)),
                }
            }
            Kind::True => Ok(Found::Numeric(1.0)),
            Kind::False => Ok(Found::Numeric(0.0)),
            Kind::Null => Ok(Found::Null),
            Kind::Object | Kind::Array | Kind::Bins | Kind::PackedBins | Kind::BinRange => {
                Err(Reason::bad_value("a scalar", self.raw(index)))
            }
        }
    }

    /// Hands over a metric named by the current path; false once the batch is full or the
    /// sink stops.
    fn emit(
        &mut self,
        found: Found<'_>,
        ts_ms: Option<i64>,
        mode: Mode,
        own_tags: Option<TagList>,
    ) -> bool {
        let own_tags = own_tags.unwrap_or_default();
        if !own_tags.is_empty() {
            self.suffix_into_key_tags();
        }
        let suffix_count = self.suffix.map_or(0, |plain| plain.count);
        let count = self.key_tags.list.len() + suffix_count + own_tags.len();
        if let Err(reason) = check_name(&self.path).and_then(|()| check_tag_count(count)) {
            return self.reject_here(reason);
        }
        if self.accepted >= SAMPLES_PER_BATCH_MAX {
            return self.reject_full();
        }
        self.accepted += 1;
        let own: Tags;
        let (tags_id, tags) = if own_tags.is_empty() {
            (self.key_tags.generation, self.key_tags.shared())
        } else {
            self.key_tags.restore();
            own = self.key_tags.list.iter().cloned().chain(own_tags).collect();
            (self.key_tags.own_id(), &own)
        };
        let text: Cow<'_, str>;
        let value = match found {
            Found::Null => ValueRef::Null,
            Found::Numeric(v) => ValueRef::Numeric(v),
            Found::Text(found) => {
                text = found;
                ValueRef::Text(&text)
            }
            Found::Histogram(h) => ValueRef::Histogram(h),
            Found::CumulativeHistogram(h) => ValueRef::CumulativeHistogram(h),
        };
        debug_assert!(
            self.suffix.is_none() || tags.is_empty(),
            "a suffix is lent alone"
        );
        // A value's own suffix, with no other tags: its name and suffix text determine the
        // series alone.
        let (tags, raw) = match self.suffix {
            Some(plain) => (
                TagsRef::Suffix(plain.text),
                Some(RawSeries {
                    first: self.path.as_bytes(),
                    second: plain.text.as_bytes(),
                }),
            ),
            None => (TagsRef::List { id: tags_id, tags }, None),
        };
        let series = Series {
            name: Name::new(&self.path),
            tags,
            lookup: Lookup::NotAsked,
            raw,
            index: None,
        };
        self.sink.sample(&series, Point { ts_ms, value, mode })
    }

    /// Rejects the rest of the body at the metric one past `SAMPLES_PER_BATCH_MAX`.
    #[cold]
    fn reject_full(&mut self) -> bool {
        let reason = Reason::Bound {
            what: "samples in the batch",
            size: self.accepted + 1,
            max: SAMPLES_PER_BATCH_MAX,
        };
        let (document, path) = (self.document, &self.path);
        self.sink
            .reject(&|| key_location(document, path), reason, Scope::Rest);
        false
    }

    fn reject_here(&mut self, reason: Reason) -> bool {
        let (document, path) = (self.document, &self.path);
        self.sink
            .reject(&|| key_location(document, path), reason, Scope::One);
        true
    }

    /// The token's bytes as text. Only strings may hold non-ASCII, and the tokenizer rejected
    /// documents with invalid UTF-8 in them, so this never fails in practice.
    fn raw(&self, index: usize) -> &'a str {
        let token = self.tape[index];
        match self.text {
            Some(text) => text.get(token.start()..token.end()).unwrap_or(""),
            None => std::str::from_utf8(&self.input[token.start()..token.end()]).unwrap_or(""),
        }
    }

    /// A string token's text with escapes resolved; `None` for a non-string or a bad `\u`
    /// surrogate (callers check the kind first where the difference matters).
    fn string(&self, index: usize) -> Option<Cow<'a, str>> {
        match self.tape[index].kind {
            Kind::String { escaped } => json::unescape(self.raw(index), escaped),
            _ => None,
        }
    }
}

/// A histogram `_value` being assembled.
#[derive(Default)]
struct HistogramParts {
    bins: Box<KeyedBins>,
    merged: Option<Histogram>,
}

impl HistogramParts {
    fn merge(&mut self, decoded: Histogram) {
        match &mut self.merged {
            Some(merged) => merged.merge(&decoded),
            None => self.merged = Some(decoded),
        }
    }

    /// The histogram; leaves `bins` empty for reuse.
    fn finish(&mut self) -> Histogram {
        let Some(merged) = self.merged.take() else {
            // The common case, bins only: no empty histogram to build and merge.
            return self.bins.take_histogram();
        };
        if self.bins.is_empty() {
            return merged;
        }
        let mut histogram = self.bins.take_histogram();
        histogram.merge(&merged);
        histogram
    }
}

/// The exact `H[d.de±dd]=n` form that `hist` (and Circonus' Go library) emit, read structurally
/// without float parsing — histogram uploads are mostly this form, and the float path costs
/// several times more. `None` for anything else, which then goes through `hist::parse_entry`.
fn emitted_entry(text: &str) -> Option<(Bin, u64)> {
    let rest = text.strip_prefix("H[")?;
    let close = rest.bytes().position(|c| c == b']')?;
    let (edge, count) = (&rest[..close], rest[close + 1..].strip_prefix('=')?);
    let (negative, edge) = match edge.strip_prefix('-') {
        Some(rest) => (true, rest.as_bytes()),
        None => (false, edge.as_bytes()),
    };
    let [d0 @ b'1'..=b'9', b'.', d1 @ b'0'..=b'9', b'e', sign @ (b'+' | b'-'), digits @ ..] = edge
    else {
        return None;
    };
    if digits.is_empty() || digits.len() > 3 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits
        .iter()
        .fold(0i16, |m, d| m * 10 + i16::from(d - b'0'));
    let exp = i8::try_from(if *sign == b'-' { -magnitude } else { magnitude }).ok()?;
    let val = ((d0 - b'0') * 10 + (d1 - b'0')) as i8;
    let bin = Bin::new(if negative { -val } else { val }, exp)?;
    Some((bin, decimal_u64(count)?))
}

/// The `H[d.de±dd]=n` shape that `hist::Bin::edge_text` prints for every finite non-zero bin
/// (two exponent digits, optional `-`), matched by position: each check is one byte compare, and
/// the bin comes straight from the digits. `None` for any other shape (`emitted_entry` and then
/// the float path take it); for every text it accepts the bin equals
/// `Bin::from_f64(edge.parse::<f64>())` (tests below check every bin and random shapes).
#[inline]
fn fixed_entry(text: &[u8]) -> Option<(u16, u64)> {
    let (negative, edge) = match text {
        [b'H', b'[', b'-', edge @ ..] => (true, edge),
        [b'H', b'[', edge @ ..] => (false, edge),
        _ => return None,
    };
    let [d0 @ b'1'..=b'9', b'.', d1 @ b'0'..=b'9', b'e', sign @ (b'+' | b'-'), e0 @ b'0'..=b'9', e1 @ b'0'..=b'9', b']', b'=', count @ ..] =
        edge
    else {
        return None;
    };
    let magnitude = ((e0 - b'0') * 10 + (e1 - b'0')) as i8;
    let exp = if *sign == b'-' { -magnitude } else { magnitude };
    let val = ((d0 - b'0') * 10 + (d1 - b'0')) as i8;
    let key = bin_key(if negative { -val } else { val }, exp)?;
    Some((key, decimal_bytes_u64(count)?))
}

/// The bins of `inside` (an array's contents) in the order read, when all of it is
/// `"H[d.de±dd]=n"` strings separated by a bare `,` (`bins::fixed_text_bins`; for the tests).
#[cfg(test)]
fn fixed_entries(inside: &[u8]) -> Option<Vec<(u16, u64)>> {
    use crate::bins::ReadBins;
    let (read, pairs) = crate::bins::read_pairs(inside, &mut KeyedBins::default());
    let end = match read? {
        ReadBins::Packed(end) | ReadBins::Keyed(end) => end,
    };
    (end == inside.len()).then_some(pairs)
}

/// A plain decimal u64 (digits only), without `str::parse`'s generality.
fn decimal_bytes_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |n, &c| {
        let digit = c.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// A plain decimal u64 (digits only), without `str::parse`'s generality.
fn decimal_u64(text: &str) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.bytes().try_fold(0u64, |n, c| {
        let digit = c.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// One number's text read as `_type` `kind` requires.
fn numeric_text(kind: &str, text: &str) -> Result<f64, Reason> {
    let expected = match kind {
        "i" => "an int32",
        "I" => "a uint32",
        "l" => "an int64",
        "L" => "a uint64",
        _ => "a finite double",
    };
    let value = match kind {
        "i" => text.parse::<i32>().ok().map(f64::from),
        "I" => text.parse::<u32>().ok().map(f64::from),
        "l" => text.parse::<i64>().ok().map(|v| v as f64),
        "L" => text.parse::<u64>().ok().map(|v| v as f64),
        _ => json_number(text).ok(),
    };
    value.ok_or_else(|| Reason::bad_value(expected, text))
}

fn key_location(document: usize, path: &str) -> String {
    format!("document {document}, key `{}`", crate::batch::excerpt(path))
}

/// Plain typing: non-negative integers as uint64 and negative ones as int64 (exact to 2^53 in
/// f64); integers beyond 64 bits and decimals as doubles; a double beyond f64 is rejected.
fn plain_number(text: &str, integer: bool) -> Result<f64, Reason> {
    if integer {
        let exact = if text.starts_with('-') {
            text.parse::<i64>().ok().map(|v| v as f64)
        } else {
            text.parse::<u64>().ok().map(|v| v as f64)
        };
        if let Some(value) = exact {
            return Ok(value);
        }
    }
    json_number(text)
}

fn json_number(text: &str) -> Result<f64, Reason> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && json::whole_number(text.as_bytes()).is_some() => {
            Ok(value)
        }
        _ => Err(Reason::bad_value("a finite number", text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bins::ReadBins;
    use proptest::prelude::*;

    #[test]
    fn emitted_entry_forms() {
        let bin = |v, e| Bin::new(v, e).unwrap();
        assert_eq!(emitted_entry("H[1.2e-03]=5"), Some((bin(12, -3), 5)));
        assert_eq!(emitted_entry("H[-5.0e+00]=1"), Some((bin(-50, 0), 1)));
        assert_eq!(emitted_entry("H[9.9e+127]=1"), Some((bin(99, 127), 1)));
        for other in [
            "H[0.0e+00]=3",
            "H[NaN]=1",
            "H[1.25e-03]=5",
            "H[1.2e-03]=-1",
            "H[1.2]=1",
        ] {
            assert_eq!(emitted_entry(other), None, "{other}");
        }
    }

    /// The fixed-shape reader gives exactly the float path's bin for every bin's edge text it
    /// accepts, and accepts every edge text with a two-digit exponent.
    #[test]
    fn fixed_entry_every_bin() {
        for val in (-99i8..=-10).chain(10..=99) {
            for exp in i8::MIN..=i8::MAX {
                let bin = Bin::new(val, exp).unwrap();
                let edge = bin.edge_text();
                let text = format!("H[{edge}]=7");
                let float_bin = Bin::from_f64(edge.parse::<f64>().unwrap());
                match fixed_entry(text.as_bytes()) {
                    Some(entry) => assert_eq!(entry, (float_bin.key(), 7), "{text}"),
                    None => assert!(exp.unsigned_abs() >= 100, "{text} not read"),
                }
                assert_eq!(float_bin, bin, "{text}");
            }
        }
    }

    /// What `fixed_entries` reads for one quoted element, or `None` when it declines.
    fn fixed_entries_one(text: &str) -> Option<(u16, u64)> {
        let quoted = format!("\"{text}\"");
        fixed_entries(quoted.as_bytes()).map(|pairs| pairs[0])
    }

    #[test]
    fn fixed_entries_lists() {
        let read = fixed_entries(br#""H[1.2e-03]=5","H[-5.0e+00]=17""#);
        let key = |v, e| Bin::new(v, e).unwrap().key();
        assert_eq!(read, Some(vec![(key(12, -3), 5), (key(-50, 0), 17)]));
        for declined in [
            &br#""H[1.2e-03]=5", "H[1.2e-03]=5""#[..],
            br#""H[1.2e-03]=5",1"#,
            br#""H[1.2e-03]=5","#,
            br#""H[1.2e-03]=""#,
            br#""H[1.2e-03]=99999999999999999999""#,
            br#""H[1.2e-3]=1""#,
            br#""H[0.2e-03]=1""#,
            br#""H[1.2e-03]=1\u0030""#,
            b"",
        ] {
            let text = String::from_utf8_lossy(declined);
            assert!(fixed_entries(declined).is_none(), "{text}");
        }
    }

    proptest! {
        /// `fixed_entries` reads exactly what `fixed_entry` reads, on texts of about the shape (up
    /// to 19 count digits).
        #[test]
        fn fixed_entries_agrees_with_fixed_entry(
            text in "H\\[-?[0-9]\\.[0-9]e[+-][0-9]{1,3}\\]=[0-9]{0,21}",
        ) {
            let (fast, fixed) = (fixed_entries_one(&text), fixed_entry(text.as_bytes()));
            let count_digits = text.len() - text.find('=').unwrap() - 1;
            if count_digits <= 19 {
                prop_assert_eq!(fast, fixed, "{}", text);
            } else {
                // Longer counts are left to the token path.
                prop_assert_eq!(fast, None, "{}", text);
            }
        }

        /// Lists of bin strings of about the shape, followed by arbitrary bytes — so that most
        /// strings are read by `fixed_text_bins`'s whole-string fast path, the rest bin by
        /// bin — read element by element what `fixed_entry` reads, and stop where it declines.
        #[test]
        fn fixed_text_bins_lists_agree_with_fixed_entry(
            texts in proptest::collection::vec(
                "H\\[-?[0-9]\\.[0-9]e[+-][0-9]{1,3}\\]=[0-9]{0,5}",
                1..8,
            ),
            tail in "[\\],\"x0-9 ]{0,20}",
        ) {
            let quoted: Vec<String> = texts.iter().map(|t| format!("\"{t}\"")).collect();
            let list = quoted.join(",");
            let body = format!("{list}{tail}");
            let want: Vec<(u16, u64)> =
                texts.iter().map_while(|t| fixed_entry(t.as_bytes())).collect();
            let mut bins = KeyedBins::default();
            let (got, read) = crate::bins::read_pairs(body.as_bytes(), &mut bins);
            if want.len() == texts.len() && !tail.starts_with(',') {
                // Packed when in storage order with every count above zero; else keyed.
                let in_order = want.windows(2).all(|w| w[0].0 < w[1].0)
                    && want.iter().all(|&(_, c)| c != 0);
                let end = list.len();
                let want_read = if in_order { ReadBins::Packed(end) } else { ReadBins::Keyed(end) };
                prop_assert_eq!(got, Some(want_read), "{}", body);
                prop_assert_eq!(read, want, "{}", body);
            } else {
                prop_assert_eq!(got, None, "{}", body);
                prop_assert_eq!(&read[..want.len().min(read.len())], &want[..read.len().min(want.len())]);
            }
        }

        /// Random texts of about the emitted shape (any mantissa digits, 1–3 exponent digits,
        /// signs, counts): whatever the fixed reader accepts, the general path reads the same.
        #[test]
        fn fixed_entry_agrees_with_float_path(
            negative in any::<bool>(),
            d0 in 0u8..10,
            d1 in 0u8..10,
            exp_negative in any::<bool>(),
            exp_digits in "[0-9]{1,3}",
            count in any::<u64>(),
        ) {
            let sign = if negative { "-" } else { "" };
            let exp_sign = if exp_negative { '-' } else { '+' };
            let edge = format!("{sign}{d0}.{d1}e{exp_sign}{exp_digits}");
            let text = format!("H[{edge}]={count}");
            let fast = fixed_entry(text.as_bytes());
            if d0 != 0 && exp_digits.len() == 2 {
                prop_assert!(fast.is_some(), "{}", text);
            }
            if let Some(fast) = fast {
                let float_bin = Bin::from_f64(edge.parse::<f64>().unwrap());
                prop_assert_eq!(fast, (float_bin.key(), count), "{}", text);
                let general = hist::parse_entry(&text).ok().map(|(b, c)| (b.key(), c));
                prop_assert_eq!(Some(fast), general, "{}", text);
            }
        }

        /// Arbitrary near-miss texts: the fixed reader accepts only what the general path
        /// reads the same way.
        #[test]
        fn fixed_entry_near_misses(text in "H\\[-?[0-9.e+-]{0,9}\\]=[0-9]{0,21}") {
            if let Some(fast) = fixed_entry(text.as_bytes()) {
                let general = hist::parse_entry(&text).ok().map(|(b, c)| (b.key(), c));
                prop_assert_eq!(Some(fast), general, "{}", text);
            }
        }

        #[test]
        fn emitted_entry_agrees_with_hist(v in any::<f64>(), count in 1u64..1000) {
            let mut h = Histogram::new();
            h.insert_n(v, count);
            for text in h.to_text() {
                if let Some(fast) = emitted_entry(&text) {
                    prop_assert_eq!(Some(fast), hist::parse_entry(&text).ok(), "{}", text);
                }
            }
        }
    }
}
