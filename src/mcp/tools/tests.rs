use super::*;

#[test]
fn the_tool_set_is_exactly_the_agent_tools() {
    let names: Vec<_> = TOOLS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "worktree_create",
            "worktree_list",
            "worktree_diff",
            "worktree_merge",
            "worktree_discard",
            "history_log",
            "history_diff",
            "history_show",
        ]
    );
    for t in TOOLS {
        let s = (t.input_schema)();
        assert_eq!(s["type"], "object", "{}: {s}", t.name);
        assert_eq!(
            t.read_only,
            !matches!(
                t.name,
                "worktree_create" | "worktree_merge" | "worktree_discard"
            )
        );
    }
    for t in TOOLS {
        let out = (t.output_schema)();
        assert_eq!(out["type"], "object", "{}: {out}", t.name);
        // Changing the project's files or deleting a worktree is
        // destructive; everything read-only is idempotent.
        assert_eq!(
            t.destructive,
            matches!(t.name, "worktree_merge" | "worktree_discard"),
            "{}",
            t.name
        );
        assert!(!t.read_only || t.idempotent, "{}", t.name);
    }
    // Lists become objects, as the output schemas say.
    assert_eq!(
        result_object("worktree_list", serde_json::json!([])),
        serde_json::json!({"worktrees": []})
    );
    assert_eq!(
        result_object("history_log", serde_json::json!([{"turn": 1}])),
        serde_json::json!({"turns": [{"turn": 1}]})
    );
    let created = serde_json::json!({"name": "a", "path": "/p", "base_turn": 1});
    assert_eq!(result_object("worktree_create", created.clone()), created);
    let merge = (TOOLS[3].input_schema)();
    assert!(merge["properties"].get("force").is_none(), "{merge}");
    assert!(merge["properties"].get("dry_run").is_some(), "{merge}");
}

#[test]
fn long_arguments_are_cut_in_error_texts() {
    let long = format!("a\"b{}", "x".repeat(1 << 20));
    let args = serde_json::json!({"turn": long, "path": "p"});
    let e = decode::<HistoryShowArgs>("history_show", args.clone()).expect_err("a string");
    let full = e.to_string();
    assert!(full.len() > 1 << 20, "serde repeats the argument");
    let cut = cut_arguments(&full, &args);
    assert!(cut.len() < 1000, "{cut}");
    assert!(cut.contains(&format!("… ({} bytes)", long.len())), "{cut}");
    assert!(
        cut.starts_with("bad arguments for history_show: invalid type"),
        "{cut}"
    );
    // Short ones stay whole.
    assert_eq!(cut_arguments("no \"p\"", &args), "no \"p\"");
}

#[test]
fn arguments_are_checked_against_the_schema() {
    let e = decode::<WorktreeMergeArgs>(
        "worktree_merge",
        serde_json::json!({"name": "a", "force": true}),
    )
    .expect_err("force is not an argument");
    assert!(
        e.to_string()
            .starts_with("bad arguments for worktree_merge: unknown field `force`"),
        "{e}"
    );
    let e = decode::<HistoryShowArgs>(
        "history_show",
        serde_json::json!({"turn": "x", "path": "a"}),
    )
    .expect_err("turn is a number");
    assert!(
        e.to_string().contains("bad arguments for history_show"),
        "{e}"
    );
    let a: HistoryLogArgs = decode("history_log", Value::Null).expect("null is {}");
    assert_eq!(a.limit, None);
    let e = ToolError::UnknownTool("rewind".into());
    assert_eq!(
        e.to_string(),
        "there is no tool \"rewind\"; the tools are worktree_create, worktree_list, \
         worktree_diff, worktree_merge, worktree_discard, history_log, history_diff, history_show"
    );
}

#[test]
fn history_log_cuts_long_labels_at_a_character_boundary() {
    let long = format!("{}é{}", "a".repeat(1023), "b".repeat(5000));
    let mut log = serde_json::json!([
        {"turn": 2, "label": long},
        {"turn": 1, "label": "short"},
        {"turn": 0, "label": null}
    ]);
    super::cut_labels(&mut log, super::LABEL_SHOWN);
    let cut = log[0]["label"].as_str().expect("label");
    assert_eq!(cut, format!("{}…", "a".repeat(1023)));
    assert_eq!(log[0]["label_bytes"], long.len());
    assert_eq!(log[1]["label"], "short");
    assert!(log[1].get("label_bytes").is_none());
    assert!(log[2]["label"].is_null());
}
