//! The Kafka side: the topic, the front's producer (a write is acknowledged once every partition
//! it touched acknowledged with acks=all), and the partition clients the storage nodes fetch with.

use std::sync::Arc;
use std::time::Duration;

use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use rskafka::BackoffConfig;

use crate::topology::Topology;

/// Longest wait between two tries of a broker request, in ms.
const BACKOFF_MS_MAX: u64 = 1_000;
/// First wait after a failed broker request, in ms.
const BACKOFF_MS_INIT: u64 = 50;

/// A Kafka failure, said plainly (which partition, what the broker or the network answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaError(pub String);

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn backoff(topology: &Topology) -> BackoffConfig {
    BackoffConfig {
        init_backoff: Duration::from_millis(BACKOFF_MS_INIT),
        max_backoff: Duration::from_millis(BACKOFF_MS_MAX),
        base: 2.0,
        deadline: Some(Duration::from_millis(topology.kafka.timeout_ms)),
    }
}

/// A client on the topology's brokers, named `client_id`.
pub async fn connect(topology: &Topology, client_id: &str) -> Result<Client, KafkaError> {
    let wait = Duration::from_millis(topology.kafka.timeout_ms);
    let built = ClientBuilder::new(topology.kafka.bootstrap.clone())
        .client_id(client_id.to_owned())
        .max_message_size(crate::RECORD_BYTES_MAX * 2)
        .backoff_config(backoff(topology))
        .build();
    match tokio::time::timeout(wait, built).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(KafkaError(format!(
            "kafka.bootstrap {}: {e}",
            topology.kafka.bootstrap.join(",")
        ))),
        Err(_) => Err(KafkaError(format!(
            "kafka.bootstrap {}: no broker answered within {} ms",
            topology.kafka.bootstrap.join(","),
            topology.kafka.timeout_ms
        ))),
    }
}

/// Creates the topic with the topology's partitions and replication unless it exists; an
/// existing topic with another partition count is an error (the count is fixed at creation).
pub async fn ensure_topic(client: &Client, topology: &Topology) -> Result<(), KafkaError> {
    let topic = &topology.kafka.topic;
    let partitions = topology.kafka.partitions;
    let existing = client
        .list_topics()
        .await
        .map_err(|e| KafkaError(format!("listing topics: {e}")))?;
    if let Some(t) = existing.iter().find(|t| &t.name == topic) {
        if t.partitions.len() != partitions as usize {
            return Err(KafkaError(format!(
                "topic {topic} has {} partitions, kafka.partitions says {partitions}: the count \
                 is fixed when the cluster is created",
                t.partitions.len()
            )));
        }
        return Ok(());
    }
    let controller = client
        .controller_client()
        .map_err(|e| KafkaError(format!("controller: {e}")))?;
    let timeout_ms = i32::try_from(topology.kafka.timeout_ms).unwrap_or(i32::MAX);
    match controller
        .create_topic(
            topic.clone(),
            partitions as i32,
            topology.kafka.replication as i16,
            timeout_ms,
        )
        .await
    {
        Ok(()) => Ok(()),
        // Another process created it first.
        Err(e) if e.to_string().contains("TopicAlreadyExists") => Ok(()),
        Err(e) => Err(KafkaError(format!("creating topic {topic}: {e}"))),
    }
}

/// One client per partition of the topic.
pub async fn partition_clients(
    client: &Client,
    topology: &Topology,
) -> Result<Vec<Arc<PartitionClient>>, KafkaError> {
    let mut out = Vec::with_capacity(topology.kafka.partitions as usize);
    for p in 0..topology.kafka.partitions {
        let pc = client
            .partition_client(
                topology.kafka.topic.clone(),
                p as i32,
                UnknownTopicHandling::Retry,
            )
            .await
            .map_err(|e| KafkaError(format!("partition {p}: {e}")))?;
        out.push(Arc::new(pc));
    }
    Ok(out)
}

/// The record's timestamp: the wall clock now (Kafka's time index and time-based retention).
fn record_time() -> rskafka::chrono::DateTime<rskafka::chrono::Utc> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    rskafka::chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// What Kafka says of a partition: its next offset (high watermark).
#[derive(Clone, Debug)]
pub struct PartitionState {
    pub partition: u32,
    pub end_offset: Result<i64, KafkaError>,
}

/// The front's producer.
pub struct Front {
    partitions: Vec<Arc<PartitionClient>>,
    timeout: Duration,
}

impl Front {
    /// Connects, creates the topic if needed, and opens every partition.
    pub async fn connect(topology: &Topology, client_id: &str) -> Result<Front, KafkaError> {
        let client = connect(topology, client_id).await?;
        ensure_topic(&client, topology).await?;
        let partitions = partition_clients(&client, topology).await?;
        Ok(Front {
            partitions,
            timeout: Duration::from_millis(topology.kafka.timeout_ms),
        })
    }

    pub fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    /// Produces each `(partition, record)` with acks=all, all at once; Ok only when every one
    /// was acknowledged. A record whose answer was lost may be in the log twice: the storage
    /// nodes apply it once (its identity). Gives each partition's offset of its record.
    pub async fn produce(
        &self,
        records: Vec<(u32, Vec<u8>)>,
    ) -> Result<Vec<(u32, i64)>, KafkaError> {
        let mut tasks = tokio::task::JoinSet::new();
        for (p, value) in records {
            let Some(client) = self.partitions.get(p as usize).cloned() else {
                return Err(KafkaError(format!("partition {p} is not in the topic")));
            };
            let timeout = self.timeout;
            tasks.spawn(async move {
                let record = Record {
                    key: None,
                    value: Some(value),
                    headers: Default::default(),
                    // Kafka's own time index only; applying never reads it.
                    timestamp: record_time(),
                };
                let sent = client.produce(
                    vec![record],
                    rskafka::client::partition::Compression::NoCompression,
                );
                match tokio::time::timeout(timeout, sent).await {
                    Ok(Ok(offsets)) => Ok((p, offsets.first().copied().unwrap_or(-1))),
                    Ok(Err(e)) => Err(KafkaError(format!("partition {p}: {e}"))),
                    Err(_) => Err(KafkaError(format!(
                        "partition {p}: not acknowledged within {} ms",
                        timeout.as_millis()
                    ))),
                }
            });
        }
        let mut first_error = None;
        let mut offsets = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined.unwrap_or_else(|e| Err(KafkaError(format!("produce task: {e}")))) {
                Ok(o) => offsets.push(o),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(offsets), Err)
    }

    /// Every partition's end offset, for status.
    pub async fn end_offsets(&self) -> Vec<PartitionState> {
        let mut out = Vec::with_capacity(self.partitions.len());
        for (p, client) in self.partitions.iter().enumerate() {
            let asked = tokio::time::timeout(self.timeout, client.get_offset(OffsetAt::Latest));
            let end_offset = match asked.await {
                Ok(Ok(o)) => Ok(o),
                Ok(Err(e)) => Err(KafkaError(e.to_string())),
                Err(_) => Err(KafkaError("no answer".into())),
            };
            out.push(PartitionState {
                partition: p as u32,
                end_offset,
            });
        }
        out
    }
}
