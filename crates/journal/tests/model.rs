#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Property test: any interleaving of appends, reads, checkpoints, rewinds, reopen, power cuts
//! and segment deletion agrees with a simple in-memory model of the log.

mod common;

use std::path::PathBuf;

use common::{group, payload, sim_opts};
use journal::sim::{PowerLoss, SimFs};
use journal::{Batch, Journal, Options, Start, Subscriber};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Append(u64),
    Read,
    Commit,
    Rewind(u8),
    Seek(u8),
    Reopen,
    PowerCut,
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..40).prop_map(Op::Append),
        3 => Just(Op::Read),
        2 => Just(Op::Commit),
        1 => any::<u8>().prop_map(Op::Rewind),
        1 => any::<u8>().prop_map(Op::Seek),
        1 => Just(Op::Reopen),
        1 => Just(Op::PowerCut),
        1 => Just(Op::Purge),
    ]
}

/// The model: the log is payload(0..next); the subscriber has a checkpoint and a position.
struct Model {
    next: u64,
    earliest: u64,
    checkpoint: u64,
    position: u64,
}

struct Sut {
    sim: SimFs,
    opts: Options,
    journal: Option<Journal>,
    sub: Option<Subscriber>,
}

impl Sut {
    fn j(&self) -> &Journal {
        self.journal.as_ref().unwrap()
    }
    fn s(&mut self) -> &mut Subscriber {
        self.sub.as_mut().unwrap()
    }
    fn reopen(&mut self, cut: bool) {
        self.sub = None;
        self.journal = None;
        if cut {
            self.sim.power_cut(PowerLoss::DropUnsynced);
        }
        let j = Journal::open(PathBuf::from("/m"), self.opts.clone()).unwrap();
        self.sub = Some(j.subscriber("s").unwrap());
        self.journal = Some(j);
    }
}

fn run(ops: &[Op], seed: u64) {
    let sim = SimFs::new(seed);
    let mut opts = sim_opts(&sim, group(), 4096);
    opts.lz4 = seed & 1 == 0;
    let j = Journal::open(PathBuf::from("/m"), opts.clone()).unwrap();
    j.add_subscriber("s", Start::Begin).unwrap();
    let sub = j.subscriber("s").unwrap();
    let mut sut = Sut {
        sim,
        opts,
        journal: Some(j),
        sub: Some(sub),
    };
    let mut m = Model {
        next: 0,
        earliest: 0,
        checkpoint: 0,
        position: 0,
    };
    let mut batch = Batch::new();
    for op in ops {
        match op {
            Op::Append(n) => {
                let recs: Vec<Vec<u8>> = (m.next..m.next + n).map(payload).collect();
                assert_eq!(sut.j().append_batch(&recs).unwrap(), m.next..m.next + n);
                m.next += n;
            }
            Op::Read => {
                let got = sut.s().next_batch(&mut batch).unwrap();
                assert_eq!(got == 0, m.position == m.next);
                for (o, p) in batch.iter() {
                    assert_eq!(o, m.position);
                    assert_eq!(p, payload(o).as_slice());
                    m.position += 1;
                }
            }
            Op::Commit => {
                sut.s().commit().unwrap();
                m.checkpoint = m.position;
            }
            Op::Rewind(f) => {
                let to = m.earliest + (m.next - m.earliest) * u64::from(*f) / 255;
                sut.sub = None;
                sut.j().rewind_subscriber("s", to).unwrap();
                sut.sub = Some(sut.j().subscriber("s").unwrap());
                m.checkpoint = to;
                m.position = to;
            }
            Op::Seek(f) => {
                let to = m.earliest + (m.next - m.earliest) * u64::from(*f) / 255;
                let mut r = sut.j().reader(to).unwrap();
                let got = common::read_checked(&mut r).unwrap();
                assert_eq!(got, (to..m.next).collect::<Vec<_>>());
            }
            Op::Reopen | Op::PowerCut => {
                // GroupCommit acknowledged everything appended, so a power cut loses nothing.
                sut.reopen(matches!(op, Op::PowerCut));
                m.position = m.checkpoint;
            }
            Op::Purge => {
                sut.j().purge().unwrap();
                let earliest = sut.j().earliest_offset().unwrap();
                assert!(earliest >= m.earliest && earliest <= m.checkpoint);
                m.earliest = earliest;
            }
        }
        // Segments are also deleted at roll time: never past the checkpoint, never re-appearing.
        let earliest = sut.j().earliest_offset().unwrap();
        assert!(
            earliest >= m.earliest && earliest <= m.checkpoint,
            "{earliest} vs {}",
            m.checkpoint
        );
        m.earliest = earliest;
        assert_eq!(sut.j().committed_offset(), m.next);
        assert_eq!(sut.s().checkpoint(), m.checkpoint);
        assert_eq!(sut.s().position(), m.position);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn journal_agrees_with_model(ops in proptest::collection::vec(op(), 1..60), seed in any::<u64>()) {
        run(&ops, seed);
    }
}
