//! Kafka: every request is `size, api_key, api_version, correlation_id, client_id, …` and its
//! response `size, correlation_id, …`; responses are paired by correlation id, not by order.
//! Every API key of Kafka 4.1 has a name (ApiVersions included); unknown keys up to
//! [`API_KEY_MAX`] are reported as `api:unknown`. A Produce with `acks=0` expects no response and
//! is not waited for.
//!
//! Tags: `api` (the API's name), `topic` for Produce and Fetch requests that name one topic.
//! Produce 13+ and Fetch 13+ (what Kafka 4.1's own clients send) name topics by id: the ids are
//! learnt from Metadata answers (version 10+, which give each topic's name and id) seen on any
//! connection, so a producer's topic shows once its client has asked for the topic's metadata
//! while observed. No rows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{be16, be32, PEEK};
use crate::pair::IN_FLIGHT_MAX;
use crate::stream::{Dir, Proto, Span, Step};
use crate::Sink;

/// The highest API key accepted as plausible (keys above it are taken as a misread).
pub const API_KEY_MAX: u16 = 127;
/// The highest API version accepted as plausible.
const API_VERSION_MAX: u16 = 40;
/// The largest message accepted (Kafka's default socket.request.max.bytes is 100 MiB).
const MESSAGE_MAX: u32 = 200 << 20;
/// Bytes of a Metadata answer read for topic ids (topics past it are not learnt).
const METADATA_PEEK: usize = 4096;
/// Topic ids remembered (shared by every connection); ids beyond are not learnt.
pub const TOPIC_IDS_MAX: usize = 10_000;
/// Topics of one Metadata answer read.
const METADATA_TOPICS_MAX: i64 = 1_000;

/// Topic names by topic id, learnt from Metadata answers, shared by every Kafka connection.
#[derive(Clone, Default)]
pub struct TopicIds(Arc<Mutex<HashMap<[u8; 16], Box<str>>>>);

impl TopicIds {
    fn learn(&self, id: [u8; 16], name: &str) {
        // A poisoned lock only means another connection's parser panicked mid-insert: the map
        // is still a valid map.
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() < TOPIC_IDS_MAX || map.contains_key(&id) {
            map.insert(id, Box::from(name));
        }
    }

    fn name(&self, id: &[u8]) -> Option<Box<str>> {
        let id: [u8; 16] = id.try_into().ok()?;
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Topic ids known now.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const NAMES: &[&str] = &[
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "LeaderAndIsr",
    "StopReplica",
    "UpdateMetadata",
    "ControlledShutdown",
    "OffsetCommit",
    "OffsetFetch",
    "FindCoordinator",
    "JoinGroup",
    "Heartbeat",
    "LeaveGroup",
    "SyncGroup",
    "DescribeGroups",
    "ListGroups",
    "SaslHandshake",
    "ApiVersions",
    "CreateTopics",
    "DeleteTopics",
    "DeleteRecords",
    "InitProducerId",
    "OffsetForLeaderEpoch",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "WriteTxnMarkers",
    "TxnOffsetCommit",
    "DescribeAcls",
    "CreateAcls",
    "DeleteAcls",
    "DescribeConfigs",
    "AlterConfigs",
    "AlterReplicaLogDirs",
    "DescribeLogDirs",
    "SaslAuthenticate",
    "CreatePartitions",
    "CreateDelegationToken",
    "RenewDelegationToken",
    "ExpireDelegationToken",
    "DescribeDelegationToken",
    "DeleteGroups",
    "ElectLeaders",
    "IncrementalAlterConfigs",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "OffsetDelete",
    "DescribeClientQuotas",
    "AlterClientQuotas",
    "DescribeUserScramCredentials",
    "AlterUserScramCredentials",
    "Vote",
    "BeginQuorumEpoch",
    "EndQuorumEpoch",
    "DescribeQuorum",
    "AlterPartition",
    "UpdateFeatures",
    "Envelope",
    "FetchSnapshot",
    "DescribeCluster",
    "DescribeProducers",
    "BrokerRegistration",
    "BrokerHeartbeat",
    "UnregisterBroker",
    "DescribeTransactions",
    "ListTransactions",
    "AllocateProducerIds",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe",
    "ControllerRegistration",
    "GetTelemetrySubscriptions",
    "PushTelemetry",
    "AssignReplicasToDirs",
    "ListConfigResources",
    "DescribeTopicPartitions",
    "ShareGroupHeartbeat",
    "ShareGroupDescribe",
    "ShareFetch",
    "ShareAcknowledge",
    "AddRaftVoter",
    "RemoveRaftVoter",
    "UpdateRaftVoter",
    "InitializeShareGroupState",
    "ReadShareGroupState",
    "WriteShareGroupState",
    "DeleteShareGroupState",
    "ReadShareGroupStateSummary",
    "StreamsGroupHeartbeat",
    "StreamsGroupDescribe",
    "DescribeShareGroupOffsets",
    "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets",
];

/// The name of an API key.
pub fn api_name(key: u16) -> &'static str {
    NAMES.get(usize::from(key)).copied().unwrap_or("unknown")
}

struct Req {
    span: Span,
    api: &'static str,
    version: u16,
    topic: Option<Box<str>>,
}

/// The message just framed.
#[derive(Default)]
struct Msg {
    corr: i32,
    api: &'static str,
    version: u16,
    topic: Option<Box<str>>,
    expects: bool,
}

#[derive(Default)]
pub struct Kafka {
    pending: HashMap<i32, Req>,
    msg: Msg,
    topics: TopicIds,
}

impl Kafka {
    /// A connection's parser, learning and resolving topic ids in `topics`.
    pub fn new(topics: TopicIds) -> Kafka {
        Kafka {
            pending: HashMap::new(),
            msg: Msg::default(),
            topics,
        }
    }
}

/// A reader over a request body: classic (int16-length strings, int32 counts) or flexible
/// (compact, unsigned-varint lengths) encodings.
struct Body<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Body<'a> {
    fn skip(&mut self, n: usize) -> Option<()> {
        self.at = self.at.checked_add(n)?;
        (self.at <= self.b.len()).then_some(())
    }

    fn i16(&mut self) -> Option<i16> {
        let v = be16(self.b, self.at)? as i16;
        self.at += 2;
        Some(v)
    }

    fn i32(&mut self) -> Option<i32> {
        let v = be32(self.b, self.at)? as i32;
        self.at += 4;
        Some(v)
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..35).step_by(7) {
            let byte = *self.b.get(self.at)?;
            self.at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// A string (nullable): `None` inside means null.
    fn string(&mut self, flexible: bool) -> Option<Option<&'a [u8]>> {
        let len: i64 = if flexible {
            self.uvarint()? as i64 - 1
        } else {
            i64::from(self.i16()?)
        };
        if len < 0 {
            return Some(None);
        }
        let start = self.at;
        self.skip(len as usize)?;
        Some(Some(&self.b[start..self.at]))
    }

    fn count(&mut self, flexible: bool) -> Option<i64> {
        if flexible {
            Some(self.uvarint()? as i64 - 1)
        } else {
            Some(i64::from(self.i32()?))
        }
    }

    /// Tagged fields (flexible versions): skipped.
    fn tags(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()?.min(64) {
            self.uvarint()?;
            let n = self.uvarint()?;
            self.skip(n as usize)?;
        }
        Some(())
    }
}

/// The one topic a Produce or Fetch request names, and whether a Produce expects a response.
fn body_facts(
    key: u16,
    version: u16,
    body: &mut Body<'_>,
    topics: &TopicIds,
) -> (Option<Box<str>>, bool) {
    let flexible = match key {
        0 => version >= 9,
        1 => version >= 12,
        _ => return (None, true),
    };
    if flexible && body.tags().is_none() {
        return (None, true);
    }
    let facts = match key {
        0 => produce(version, flexible, body, topics),
        _ => fetch(version, flexible, body, topics).map(|t| (t, true)),
    };
    facts.unwrap_or((None, true))
}

fn produce(
    version: u16,
    flexible: bool,
    b: &mut Body<'_>,
    topics: &TopicIds,
) -> Option<(Option<Box<str>>, bool)> {
    if version >= 3 {
        b.string(flexible)?;
    }
    let acks = b.i16()?;
    b.i32()?;
    let topic = if version >= 13 {
        one_topic_id(b, topics)
    } else {
        one_topic(b, flexible)
    };
    Some((topic, acks != 0))
}

fn fetch(
    version: u16,
    flexible: bool,
    b: &mut Body<'_>,
    topics: &TopicIds,
) -> Option<Option<Box<str>>> {
    if version < 15 {
        b.i32()?;
    }
    b.skip(8)?;
    if version >= 3 {
        b.skip(4)?;
    }
    if version >= 4 {
        b.skip(1)?;
    }
    if version >= 7 {
        b.skip(8)?;
    }
    Some(if version >= 13 {
        one_topic_id(b, topics)
    } else {
        one_topic(b, flexible)
    })
}

/// The name of the one topic a request names by id (flexible versions only), if learnt.
fn one_topic_id(b: &mut Body<'_>, topics: &TopicIds) -> Option<Box<str>> {
    if b.count(true)? != 1 {
        return None;
    }
    let start = b.at;
    b.skip(16)?;
    topics.name(&b.b[start..b.at])
}

/// Learns every (topic id, name) a Metadata answer (version 10+, flexible) lists within
/// `b`; reading stops at the first field cut off.
fn learn_metadata(b: &mut Body<'_>, topics: &TopicIds) -> Option<()> {
    b.tags()?; // the response header's
    b.i32()?; // throttle_time_ms
    let brokers = b.count(true)?;
    for _ in 0..brokers.clamp(0, METADATA_TOPICS_MAX) {
        b.i32()?;
        b.string(true)?;
        b.i32()?;
        b.string(true)?;
        b.tags()?;
    }
    b.string(true)?; // cluster_id
    b.i32()?; // controller_id
    let n = b.count(true)?;
    for _ in 0..n.clamp(0, METADATA_TOPICS_MAX) {
        let error = b.i16()?;
        let name = b.string(true)?;
        let start = b.at;
        b.skip(16)?;
        let id = &b.b[start..b.at];
        if let (0, Some(Ok(name)), Ok(id)) = (error, name.map(std::str::from_utf8), id.try_into()) {
            if id != [0u8; 16] && !name.is_empty() && name.len() <= 249 {
                topics.learn(id, name);
            }
        }
        b.skip(1)?; // is_internal
        let partitions = b.count(true)?;
        for _ in 0..partitions.clamp(0, i64::from(u16::MAX)) {
            b.skip(2 + 4 + 4 + 4)?;
            for _ in 0..3 {
                let nodes = b.count(true)?;
                b.skip(4 * usize::try_from(nodes.max(0)).ok()?)?;
            }
            b.tags()?;
        }
        b.i32()?; // topic_authorized_operations
        b.tags()?;
    }
    Some(())
}

fn one_topic(b: &mut Body<'_>, flexible: bool) -> Option<Box<str>> {
    if b.count(flexible)? != 1 {
        return None;
    }
    let name = b.string(flexible)??;
    let name = std::str::from_utf8(name).ok()?;
    (!name.is_empty() && name.len() <= 249).then(|| Box::from(name))
}

fn plausible_request(b: &[u8]) -> bool {
    let (Some(size), Some(key), Some(version), Some(client)) =
        (be32(b, 0), be16(b, 4), be16(b, 6), be16(b, 12))
    else {
        return false;
    };
    (12..=MESSAGE_MAX).contains(&size)
        && key <= API_KEY_MAX
        && usize::from(key) < NAMES.len()
        && version <= API_VERSION_MAX
        && (client as i16 == -1 || u32::from(client) + 10 <= size)
}

impl Kafka {
    fn request(&mut self, buf: &[u8]) -> Step {
        let Some(size) = be32(buf, 0) else {
            return Step::Need;
        };
        if buf.len() < 14 {
            return Step::Need;
        }
        if !plausible_request(buf) {
            return Step::Bad;
        }
        let total = u64::from(size) + 4;
        let peek = (total as usize).min(4 + PEEK);
        let Some(msg) = buf.get(..peek) else {
            return Step::Need;
        };
        let (key, version) = (be16(msg, 4).unwrap_or(0), be16(msg, 6).unwrap_or(0));
        let corr = be32(msg, 8).unwrap_or(0) as i32;
        let mut body = Body { b: msg, at: 12 };
        let client = body.string(false);
        let (topic, expects) = match client {
            Some(_) => body_facts(key, version, &mut body, &self.topics),
            None => (None, true),
        };
        self.msg = Msg {
            corr,
            api: api_name(key),
            version,
            topic,
            expects,
        };
        Step::Eat {
            take: peek,
            skip: total - peek as u64,
            end: true,
        }
    }

    fn response(&mut self, buf: &[u8]) -> Step {
        let (Some(size), Some(corr)) = (be32(buf, 0), be32(buf, 4)) else {
            return Step::Need;
        };
        if !(4..=MESSAGE_MAX).contains(&size) {
            return Step::Bad;
        }
        let corr = corr as i32;
        self.msg = Msg {
            corr,
            expects: true,
            ..Msg::default()
        };
        let mut take = 8;
        if let Some(req) = self.pending.get(&corr) {
            if req.api == "Metadata" && req.version >= 10 {
                // Read what fits of the answer (waiting for at most METADATA_PEEK bytes of it).
                take = (size as usize + 4).min(METADATA_PEEK);
                let Some(msg) = buf.get(..take) else {
                    return Step::Need;
                };
                let _ = learn_metadata(&mut Body { b: msg, at: 8 }, &self.topics);
            }
        }
        Step::Eat {
            take,
            skip: u64::from(size) + 4 - take as u64,
            end: true,
        }
    }
}

impl Proto for Kafka {
    fn parse(&mut self, dir: Dir, buf: &[u8]) -> Step {
        match dir {
            Dir::Request => self.request(buf),
            Dir::Response => self.response(buf),
        }
    }

    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn Sink) {
        let Msg {
            corr,
            api,
            version,
            topic,
            expects,
        } = std::mem::take(&mut self.msg);
        match dir {
            Dir::Request if !expects => {}
            Dir::Request => {
                if self.pending.len() >= IN_FLIGHT_MAX {
                    out.unpaired(1);
                    return;
                }
                if self
                    .pending
                    .insert(
                        corr,
                        Req {
                            span,
                            api,
                            version,
                            topic,
                        },
                    )
                    .is_some()
                {
                    out.unpaired(1);
                }
            }
            Dir::Response => {
                let req = match self.pending.remove(&corr) {
                    Some(r) if r.span.first_ns <= span.first_ns => r,
                    _ => {
                        out.orphan();
                        return;
                    }
                };
                let tags = [
                    ("api", req.api),
                    ("topic", req.topic.as_deref().unwrap_or("")),
                ];
                let n = if req.topic.is_some() { 2 } else { 1 };
                out.pair(&req.span, &span, &tags[..n], None);
            }
        }
    }

    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize> {
        match dir {
            Dir::Request => (0..buf.len()).find(|&i| plausible_request(&buf[i..])),
            Dir::Response => (0..buf.len()).find(|&i| {
                let (Some(size), Some(corr)) = (be32(buf, i), be32(buf, i + 4)) else {
                    return false;
                };
                (4..=MESSAGE_MAX).contains(&size) && self.pending.contains_key(&(corr as i32))
            }),
        }
    }

    fn gap(&mut self, dir: Dir, out: &mut dyn Sink) {
        if dir == Dir::Response {
            out.unpaired(self.pending.len() as u64);
            self.pending.clear();
        }
    }
}
