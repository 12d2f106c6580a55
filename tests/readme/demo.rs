//! `idem demo` plays its three scenarios; its table's numbers are checked, not just
//! its exit code.

use idem::demo::run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_shows_idem_executing_each_intent_once() {
    let _panics = crate::support::panics::watched();
    let mut out = Vec::new();
    let rows = run(&mut out).await.expect("demo runs");
    let text = String::from_utf8(out).unwrap();
    assert_eq!(rows.len(), 3);
    for (scenario, direct, through) in &rows {
        assert!(
            direct.charges >= 2,
            "{scenario:?}: direct calls double-charge: {direct:?}"
        );
        assert_eq!(direct.charges, direct.calls, "{scenario:?}");
        assert_eq!(through.calls, direct.calls, "{scenario:?}");
        assert_eq!(
            through.charges, 1,
            "{scenario:?}: idem executes once: {through:?}"
        );
        assert_eq!(
            through.replays + 1,
            through.calls,
            "{scenario:?}: every repeat is a replay"
        );
    }
    assert!(
        text.contains("3 intended charges: 9 executed straight to the API, 3 through idem."),
        "{text}"
    );
}
