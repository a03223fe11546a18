use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// Polls `now` until `None`, returning everything that came out.
fn drain<T>(wheel: &mut Wheel<T>, now: u64) -> Vec<(u64, T)> {
    std::iter::from_fn(|| wheel.poll(now)).collect()
}

/// Drives the wheel only through `next_expiration` wake-ups until it is
/// empty, checking each item comes out exactly at its deadline (items that
/// were already late come out at the first wake-up, at their own deadline
/// or just after). Returns `(wake-ups, wake-ups that returned nothing)`.
fn drive_by_wakeups<T>(wheel: &mut Wheel<T>) -> (usize, usize) {
    let start = wheel.elapsed();
    let (mut wakeups, mut spurious) = (0, 0);
    let mut last_at = 0;
    while let Some(t) = wheel.next_expiration() {
        wakeups += 1;
        let fired = drain(wheel, t);
        if fired.is_empty() {
            spurious += 1;
            let next = wheel.next_expiration();
            assert!(next.is_none_or(|n| n > t), "no progress at {t}: {next:?}");
        }
        for (at, _) in fired {
            assert!(at >= last_at, "out of order: {at} after {last_at}");
            last_at = at;
            if at > start {
                assert_eq!(at, t, "future item not fired exactly at its deadline");
            } else {
                assert!(at <= start.max(t));
            }
        }
    }
    assert!(wheel.is_empty());
    (wakeups, spurious)
}

#[test]
fn level_for_boundaries() {
    for at in 0..64 {
        assert_eq!(level_for(0, at), 0, "at = {at}");
    }
    for level in 1..LEVELS {
        let span = slot_span(level);
        for pos in 1..64u64 {
            let at = pos * span;
            assert_eq!(level_for(0, at), level, "at = {at:#b}");
            assert_eq!(level_for(0, at + 1), level, "at = {:#b}", at + 1);
            assert_eq!(
                level_for(0, at + span - 1),
                level,
                "at = {at:#b} + span - 1"
            );
            // Just below the first slot of this level is the level below.
            if pos == 1 {
                assert_eq!(level_for(0, at - 1), level - 1, "at = {:#b}", at - 1);
            }
        }
    }
    assert_eq!(level_for(0, SPAN - 1), LEVELS - 1);
    assert_eq!(level_for(0, SPAN), LEVELS);
    assert_eq!(level_for(0, u64::MAX), LEVELS);
    // Relative to a non-zero time: only the differing bits count.
    assert_eq!(level_for(100, 101), 0);
    assert_eq!(level_for(127, 128), 1);
    assert_eq!(level_for(4095, 4096), 2);
    assert_eq!(level_for(SPAN - 1, SPAN), LEVELS);
    assert_eq!(level_for(SPAN, SPAN + 1), 0);
    assert_eq!(level_for(SPAN + 5, 2 * SPAN - 1), LEVELS - 1);
}

#[test]
fn empty_wheel() {
    let mut wheel = Wheel::<u32>::new();
    assert!(wheel.is_empty());
    assert_eq!(wheel.len(), 0);
    assert_eq!(wheel.next_expiration(), None);
    assert_eq!(wheel.poll(1_000), None);
    assert_eq!(wheel.elapsed(), 1_000);
    assert_eq!(wheel.next_expiration(), None);
}

#[test]
fn item_at_zero_fires_immediately() {
    let mut wheel = Wheel::new();
    wheel.insert(0, 'a');
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.next_expiration(), Some(0));
    assert_eq!(wheel.poll(0), Some((0, 'a')));
    assert_eq!(wheel.poll(0), None);
    assert!(wheel.is_empty());
}

#[test]
fn now_and_past_items_come_first_in_order() {
    let mut wheel = Wheel::new();
    assert_eq!(wheel.poll(100), None);
    wheel.insert(120, 'c');
    wheel.insert(100, 'a');
    wheel.insert(50, 'b');
    wheel.insert(7, 'z');
    assert_eq!(wheel.next_expiration(), Some(7));
    assert_eq!(wheel.poll(0), Some((7, 'z'))); // earlier `now` counts as 100
    assert_eq!(wheel.poll(100), Some((50, 'b')));
    assert_eq!(wheel.next_expiration(), Some(100));
    assert_eq!(wheel.poll(100), Some((100, 'a')));
    assert_eq!(wheel.poll(119), None);
    assert_eq!(wheel.poll(120), Some((120, 'c')));
    assert!(wheel.is_empty());
}

#[test]
fn time_never_goes_backwards() {
    let mut wheel = Wheel::new();
    wheel.insert(500, ());
    assert_eq!(wheel.poll(400), None);
    assert_eq!(wheel.poll(10), None);
    assert_eq!(wheel.elapsed(), 400);
    wheel.insert(300, ());
    assert_eq!(wheel.poll(10), Some((300, ())));
    assert_eq!(wheel.poll(499), None);
    assert_eq!(wheel.poll(500), Some((500, ())));
}

#[test]
fn fires_exactly_at_deadline_never_before() {
    let deadlines = [
        1,
        63,
        64,
        65,
        4_095,
        4_096,
        4_097,
        262_143,
        262_144,
        (1 << 24) + 3,
        (1 << 30) + 7,
        SPAN - 1,
        SPAN,
        SPAN + 1,
        (1 << 40) + 12_345,
    ];
    for &at in &deadlines {
        let mut wheel = Wheel::new();
        wheel.insert(at, at);
        assert!(wheel.next_expiration().unwrap() <= at);
        assert_eq!(wheel.poll(at - 1), None, "at = {at}");
        assert!(wheel.next_expiration().unwrap() <= at);
        assert_eq!(wheel.poll(at), Some((at, at)), "at = {at}");
        assert!(wheel.is_empty());
    }
    // And polling every millisecond on the way.
    let mut wheel = Wheel::new();
    wheel.insert(5_000, ());
    for now in 0..5_000 {
        assert_eq!(wheel.poll(now), None);
    }
    assert_eq!(wheel.poll(5_000), Some((5_000, ())));
}

#[test]
fn items_come_out_in_deadline_order() {
    let mut wheel = Wheel::new();
    // A spread over all levels, inserted in a scrambled order.
    let mut deadlines: Vec<u64> = (0..2_000u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24) % (1 << 33))
        .collect();
    for (i, &at) in deadlines.iter().enumerate() {
        wheel.insert(at, i);
    }
    let fired = drain(&mut wheel, u64::MAX - 1);
    deadlines.sort_unstable();
    let got: Vec<u64> = fired.iter().map(|&(at, _)| at).collect();
    assert_eq!(got, deadlines);
    assert!(wheel.is_empty());
}

#[test]
fn far_future_items() {
    let mut wheel = Wheel::new();
    let far = [SPAN + 5, 3 * SPAN + 1, 1 << 50, u64::MAX - 1, u64::MAX];
    for &at in far.iter().rev() {
        wheel.insert(at, at);
    }
    wheel.insert(10, 10);
    assert_eq!(wheel.poll(10), Some((10, 10)));
    for &at in &far {
        let next = wheel.next_expiration().unwrap();
        assert!(next <= at);
        assert_eq!(wheel.poll(at - 1), None);
        assert_eq!(wheel.poll(at), Some((at, at)));
        assert_eq!(wheel.poll(at), None);
    }
    assert!(wheel.is_empty());
    assert_eq!(wheel.elapsed(), u64::MAX);
    // Still usable at the end of time.
    wheel.insert(u64::MAX, 0);
    wheel.insert(3, 1);
    assert_eq!(drain(&mut wheel, 0), vec![(3, 1), (u64::MAX, 0)]);
}

#[test]
fn far_future_wakeups_are_per_occupied_block() {
    let mut wheel = Wheel::new();
    wheel.insert(u64::MAX, ());
    wheel.insert(1 << 45, ());
    let (wakeups, spurious) = drive_by_wakeups(&mut wheel);
    // Per item: one overflow block start plus at most one per level.
    assert!(wakeups <= 2 * (LEVELS + 1), "{wakeups} wake-ups");
    assert!(spurious <= 2 * LEVELS, "{spurious} spurious");
}

#[test]
fn many_items_in_one_slot() {
    let mut wheel = Wheel::new();
    // Same level-0 slot and deadline.
    for i in 0..10_000 {
        wheel.insert(40, i);
    }
    // Same level-2 slot, different deadlines, inserted descending.
    for i in 0..10_000u64 {
        wheel.insert(5 * 4_096 + (4_095 - i % 4_096), i);
    }
    assert_eq!(wheel.len(), 20_000);
    let first = drain(&mut wheel, 40);
    assert_eq!(first.len(), 10_000);
    assert!(first.iter().all(|&(at, _)| at == 40));
    let mut seen: Vec<u64> = first.iter().map(|&(_, i)| i).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..10_000).collect::<Vec<_>>());
    assert_eq!(wheel.poll(5 * 4_096 - 1), None);
    let rest = drain(&mut wheel, 6 * 4_096);
    assert_eq!(rest.len(), 10_000);
    assert!(rest.windows(2).all(|w| w[0].0 <= w[1].0));
    assert!(wheel.is_empty());
}

#[test]
fn next_expiration_is_a_lower_bound_and_makes_progress() {
    let mut wheel = Wheel::new();
    let deadlines = [70u64, 4_200, 300_000, 20_000_000, 1 << 33, (1 << 37) + 9];
    for &at in &deadlines {
        wheel.insert(at, at);
    }
    let mut remaining: BTreeSet<u64> = deadlines.iter().copied().collect();
    while let Some(t) = wheel.next_expiration() {
        let earliest = *remaining.first().unwrap();
        assert!(t <= earliest, "next_expiration {t} > earliest {earliest}");
        match wheel.poll(t) {
            Some((at, _)) => {
                assert_eq!(at, t);
                remaining.remove(&at);
            }
            None => assert!(wheel.next_expiration().unwrap() > t),
        }
    }
    assert!(remaining.is_empty());
}

#[test]
fn ten_hours_out_needs_a_handful_of_wakeups() {
    let at = 10 * 60 * 60 * 1_000 + 1_234;
    let mut wheel = Wheel::new();
    wheel.insert(at, ());
    let mut wakeups = 0;
    let mut fired = None;
    while let Some(t) = wheel.next_expiration() {
        wakeups += 1;
        if let Some(item) = wheel.poll(t) {
            assert_eq!(t, at);
            fired = Some(item);
        }
    }
    assert_eq!(fired, Some((at, ())));
    // One wake-up per level the item cascades through, plus the firing one.
    assert!(wakeups <= LEVELS, "{wakeups} wake-ups");
}

#[test]
fn idle_wheel_with_a_million_far_items_sleeps_long() {
    const DAY: u64 = 24 * 60 * 60 * 1_000;
    let mut wheel = Wheel::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut earliest = u64::MAX;
    for i in 0..1_000_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = 10 * DAY + x % (20 * DAY);
        earliest = earliest.min(at);
        wheel.insert(at, i);
    }
    let first = wheel.next_expiration().unwrap();
    assert!(first <= earliest);
    assert!(first >= 9 * DAY, "first wake-up after only {first} ms");
    // Reaching the first item takes a few wake-ups, not one per slot.
    let mut wakeups = 0;
    loop {
        let t = wheel.next_expiration().unwrap();
        wakeups += 1;
        if let Some((at, _)) = wheel.poll(t) {
            assert_eq!(at, earliest);
            break;
        }
    }
    assert!(wakeups <= LEVELS, "{wakeups} wake-ups");
    assert_eq!(wheel.len(), 999_999);
}

/// How far from the current time an inserted deadline lies.
#[derive(Clone, Debug)]
enum Offset {
    Past(u64),
    Future(u64),
    Max,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Offset),
    Advance(u64),
}

fn offset() -> impl Strategy<Value = Offset> {
    prop_oneof![
        3 => (0..128u64).prop_map(Offset::Future),
        3 => (0..(1u64 << 20)).prop_map(Offset::Future),
        2 => (0..SPAN).prop_map(Offset::Future),
        2 => (SPAN..(1u64 << 42)).prop_map(Offset::Future),
        2 => (1..5_000u64).prop_map(Offset::Past),
        1 => Just(Offset::Future(0)),
        1 => Just(Offset::Max),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => offset().prop_map(Op::Insert),
        2 => (0..64u64).prop_map(Op::Advance),
        2 => (0..(1u64 << 20)).prop_map(Op::Advance),
        1 => (0..(1u64 << 37)).prop_map(Op::Advance),
        1 => (0..(1u64 << 42)).prop_map(Op::Advance),
    ]
}

fn deadline(now: u64, offset: &Offset) -> u64 {
    match *offset {
        Offset::Past(d) => now.saturating_sub(d),
        Offset::Future(d) => now.saturating_add(d),
        Offset::Max => u64::MAX,
    }
}

fn check_bound(wheel: &Wheel<u64>, oracle: &BTreeSet<(u64, u64)>) {
    assert_eq!(wheel.len(), oracle.len());
    match oracle.first() {
        None => assert_eq!(wheel.next_expiration(), None),
        Some(&(min, _)) => {
            let next = wheel.next_expiration().expect("items pending");
            assert!(next <= min, "next_expiration {next} > earliest {min}");
        }
    }
}

fn check_drain(wheel: &mut Wheel<u64>, oracle: &mut BTreeSet<(u64, u64)>, now: u64) {
    let fired = drain(wheel, now);
    let mut last = 0;
    for &(at, seq) in &fired {
        assert!(at <= now, "item {seq} at {at} fired early at {now}");
        assert!(at >= last, "out of order: {at} after {last}");
        last = at;
        assert!(oracle.remove(&(at, seq)), "unknown or repeated item {seq}");
    }
    if let Some(&(min, seq)) = oracle.first() {
        assert!(min > now, "item {seq} at {min} left due at {now}");
    }
    check_bound(wheel, oracle);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn matches_oracle(ops in proptest::collection::vec(op(), 1..120)) {
        let mut wheel = Wheel::new();
        let mut oracle = BTreeSet::new();
        let mut now = 0u64;
        for (seq, op) in ops.iter().enumerate() {
            match op {
                Op::Insert(offset) => {
                    let at = deadline(now, offset);
                    wheel.insert(at, seq as u64);
                    oracle.insert((at, seq as u64));
                    check_bound(&wheel, &oracle);
                }
                Op::Advance(by) => {
                    now = now.saturating_add(*by);
                    check_drain(&mut wheel, &mut oracle, now);
                    prop_assert_eq!(wheel.elapsed(), now);
                }
            }
        }
        // Whatever is left is reached through wake-ups alone, then nothing.
        let pending = oracle.len();
        let (wakeups, spurious) = drive_by_wakeups(&mut wheel);
        // Per item: an overflow block start, one per level, the firing one.
        prop_assert!(wakeups <= pending * (LEVELS + 2), "{} wake-ups", wakeups);
        prop_assert!(spurious <= pending * (LEVELS + 1), "{} spurious", spurious);
    }

    #[test]
    fn wakeups_reach_every_item_exactly(
        deadlines in proptest::collection::vec(offset(), 1..60),
        start in 0..(1u64 << 40),
    ) {
        let mut wheel = Wheel::new();
        prop_assert_eq!(wheel.poll(start), None);
        for (seq, offset) in deadlines.iter().enumerate() {
            wheel.insert(deadline(start, offset), seq as u64);
        }
        let pending = wheel.len();
        let (wakeups, spurious) = drive_by_wakeups(&mut wheel);
        prop_assert!(wakeups <= pending * (LEVELS + 2), "{} wake-ups", wakeups);
        prop_assert!(spurious <= pending * (LEVELS + 1), "{} spurious", spurious);
    }
}

#[test]
fn a_huge_cascade_is_refiled_in_bounded_steps_and_stays_in_order() {
    let mut wheel = Wheel::new();
    let n = 10 * REFILE_CHUNK as u64;
    // All in one level-2 slot (4096 ms wide, aligned at 8192), spread over its span but
    // none due at the slot's very start, so every chunk but the last reports `Busy`.
    for i in 0..n {
        wheel.insert(8_193 + (i * 7) % 4_095, i);
    }
    let mut busy = 0;
    let mut out = Vec::new();
    loop {
        match wheel.poll_bounded(20_000) {
            Polled::Item(at, _) => out.push(at),
            Polled::Busy => busy += 1,
            Polled::Idle => break,
        }
    }
    assert_eq!(out.len() as u64, n);
    assert!(
        out.windows(2).all(|w| w[0] <= w[1]),
        "nondecreasing deadlines"
    );
    assert_eq!(
        busy, 9,
        "one full chunk per step: every chunk but the last is `Busy`"
    );
    assert!(wheel.next_expiration().is_none());
}

#[test]
fn no_bounded_step_re_files_more_than_a_chunk() {
    // A cascade of one item more than a chunk cannot be done in one step; one of a chunk is.
    for (n, busy_steps) in [(REFILE_CHUNK, 0), (REFILE_CHUNK + 1, 1)] {
        let mut wheel = Wheel::new();
        for i in 0..n as u64 {
            wheel.insert(8_193 + i, i);
        }
        let mut busy = 0;
        let mut out = 0;
        loop {
            match wheel.poll_bounded(20_000) {
                Polled::Item(..) => out += 1,
                Polled::Busy => busy += 1,
                Polled::Idle => break,
            }
        }
        assert_eq!((out, busy), (n, busy_steps), "{n} items");
    }
}
