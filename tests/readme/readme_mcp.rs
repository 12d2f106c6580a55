//! The README's MCP example, run as a reader would (issue 34): the client script it shows
//! is `examples/mcp_client.py` word for word, the commands it shows agree with
//! `config/examples/mcp.yaml` (the MCP server's port is the config's upstream, the
//! client's URL its listener), and the script, run through idem in front of
//! `tests/mcp/server.py` with that config, prints what the README says: one charge.
//!
//! Ports are the only change: the test's idem listens on free ports and its upstream is
//! the test's MCP server, so it never clashes with another test.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::harness::IdemProcess;
use support::mcp::{ensure_peers, McpServer};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The body of the first fenced block of `lang` after `marker` in `text`.
fn block_after(text: &str, marker: &str, lang: &str) -> String {
    let from = text
        .find(marker)
        .unwrap_or_else(|| panic!("README has no {marker:?}"));
    let fence = format!("```{lang}\n");
    let start = text[from..].find(&fence).expect("a fenced block") + from + fence.len();
    let end = text[start..].find("```\n").expect("its end") + start;
    text[start..end].to_owned()
}

/// Hex ids (a charge id) as `<id>`, so the README's example output can be compared.
fn without_ids(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split(' ')
                .map(
                    |w| match w.len() == 32 && w.bytes().all(|b| b.is_ascii_hexdigit()) {
                        true => "<id>",
                        false => w,
                    },
                )
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_mcp_example_runs_as_shown() {
    let readme = read("README.md");
    let section = &readme[readme.find("## In front of an MCP server").unwrap()..];
    let script = read("examples/mcp_client.py");
    let shown = block_after(section, "`examples/mcp_client.py`:", "python");
    let code = &script[script.find("\"\"\"\n\n").expect("the script's docstring") + 5..];
    assert_eq!(
        shown, code,
        "the README shows examples/mcp_client.py as it is"
    );

    let config = read("config/examples/mcp.yaml");
    let commands = block_after(section, "A real session", "sh");
    assert!(config.contains("listen: 127.0.0.1:8081\n"), "{config}");
    assert!(config.contains("  url: http://127.0.0.1:3001 "), "{config}");
    assert!(
        commands.contains("tests/mcp/server.py 3001 ")
            && commands.contains("serve --config config/examples/mcp.yaml")
            && commands.contains("examples/mcp_client.py"),
        "{commands}"
    );
    assert!(code.contains("\"http://127.0.0.1:8081/mcp\""), "{code}");

    let server = McpServer::start("json");
    let yaml = config
        .replace("listen: 127.0.0.1:8081\n", "")
        .replace("admin:\n  listen: 127.0.0.1:9902\n", "")
        .replace("http://127.0.0.1:3001", &server.url());
    let idem = IdemProcess::spawn(&yaml).await;
    let python = ensure_peers().join("venv/bin/python");
    let out = tokio::task::block_in_place(|| {
        Command::new(python)
            .arg(repo().join("examples/mcp_client.py"))
            .arg(idem.url("/mcp"))
            .output()
            .expect("run examples/mcp_client.py")
    });
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
    let expected = block_after(section, "examples/mcp_client.py`:", "text");
    assert_eq!(without_ids(&printed), without_ids(&expected));
    let ids: Vec<&str> = printed
        .split_whitespace()
        .filter(|w| w.len() == 32 && w.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    assert_eq!(ids.len(), 3, "{printed}");
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "one charge id: {printed}"
    );
    assert_eq!(server.executions("charge_customer"), 1, "one charge");
}
