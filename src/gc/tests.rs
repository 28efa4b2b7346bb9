use super::*;

#[test]
fn the_policy_keeps_the_newest_turns_and_every_pinned_one() {
    let never = |_| -> Result<u64, IndexError> { Ok(0) };
    let keep = |keep| Retention {
        keep,
        max_bytes: None,
        min_age_days: None,
    };
    assert_eq!(cut_point(1, 10, keep(3), &[], never).ok(), Some((8, None)));
    assert_eq!(
        cut_point(4, 10, keep(100), &[], never).ok(),
        Some((4, None))
    );
    assert_eq!(
        cut_point(1, 10, keep(u64::MAX), &[], never).ok(),
        Some((1, None))
    );
    let pin = Pin::Restore {
        rewind_turn: 9,
        rewound_to: 5,
    };
    let (cut, note) = cut_point(1, 10, keep(1), &[pin], never).expect("cut");
    assert_eq!(cut, 5);
    assert_eq!(
        note.as_deref(),
        Some("kept turns from 5: the unfinished rewind to turn 5 (recorded as turn 9) needs them")
    );
    // The byte budget drops more old turns, the open turn stays.
    let bytes = |from: u64| -> Result<u64, IndexError> { Ok(100 * (11 - from)) };
    let budget = Retention {
        keep: 100,
        max_bytes: Some(250),
        min_age_days: None,
    };
    assert_eq!(cut_point(1, 10, budget, &[], bytes).ok(), Some((9, None)));
}
