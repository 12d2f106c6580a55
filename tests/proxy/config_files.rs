//! Every shipped configuration loads; every bad fixture fails exactly as it says.
//!
//! Fixtures carry their expectations in leading comments, so adding a case is adding a
//! file:
//! - `tests/fixtures/bad/*.yaml`: `# expect: LINE:COL TEXT` per error. The load must
//!   fail with exactly that many errors, each rendered as `FILE:LINE:COL: TEXT…`.
//! - `tests/fixtures/warn/*.yaml`: `# warn: LINE:COL TEXT` per warning; the load succeeds.
//!
//! Variables are looked up in an empty environment, so the shipped files must work on
//! their `${NAME:-default}` defaults alone and the test never depends on the machine.

use std::path::{Path, PathBuf};

use idem::config::Config;

fn no_env(_: &str) -> Option<String> {
    None
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .yaml files in {}", dir.display());
    files
}

/// `# TAG: LINE:COL TEXT` lines → `FILE:LINE:COL: TEXT`.
fn expectations(file: &Path, tag: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let prefix = format!("# {tag}: ");
    let found: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| {
            let (place, message) = rest.split_once(' ').unwrap_or((rest, ""));
            format!("{}:{place}: {message}", file.display())
        })
        .collect();
    assert!(!found.is_empty(), "{}: no `# {tag}:` line", file.display());
    found
}

fn load(file: &Path) -> Result<Config, idem::config::ConfigErrors> {
    Config::load_with_env(file, no_env)
}

#[test]
fn sample_config_loads_without_warnings() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/idem.yaml");
    let config = load(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.routes.len(), 3);
    assert_eq!(config.upstream.url.to_string(), "http://127.0.0.1:3000/");
    assert!(config.warnings.is_empty(), "{:#?}", config.warnings);
    assert_eq!(config.source.as_deref(), Some(file.as_path()));
    let table = config.route_table();
    for name in ["charge_invoice", "send_email", "create_ticket"] {
        assert!(table.contains(name), "{table}");
    }
}

#[test]
fn every_example_loads_without_warnings() {
    for file in yaml_files("config/examples") {
        let config = load(&file).unwrap_or_else(|e| panic!("{}:\n{e}", file.display()));
        assert!(!config.routes.is_empty(), "{}", file.display());
        assert!(
            config.warnings.is_empty(),
            "{}: {:#?}",
            file.display(),
            config.warnings
        );
    }
}

/// Compares rendered messages with expectations; returns a report of mismatches.
fn mismatches(file: &Path, expected: &[String], rendered: &[String]) -> Option<String> {
    let missing: Vec<&String> = expected
        .iter()
        .filter(|want| !rendered.iter().any(|got| got.starts_with(want.as_str())))
        .collect();
    if missing.is_empty() && rendered.len() == expected.len() {
        return None;
    }
    Some(format!(
        "{}: expected {} message(s){}
got:\n  {}",
        file.display(),
        expected.len(),
        missing
            .iter()
            .map(|m| format!("\n  missing: {m}"))
            .collect::<String>(),
        rendered.join("\n  ")
    ))
}

#[test]
fn every_bad_fixture_fails_as_expected() {
    let mut failures = Vec::new();
    for file in yaml_files("tests/fixtures/bad") {
        let expected = expectations(&file, "expect");
        match load(&file) {
            Ok(_) => failures.push(format!("{}: loaded, but should fail", file.display())),
            Err(errors) => {
                let rendered: Vec<String> = errors.errors().iter().map(|e| e.to_string()).collect();
                failures.extend(mismatches(&file, &expected, &rendered));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_warn_fixture_loads_with_its_warnings() {
    let mut failures = Vec::new();
    for file in yaml_files("tests/fixtures/warn") {
        let expected = expectations(&file, "warn");
        match load(&file) {
            Err(e) => failures.push(format!("{}: failed to load:\n{e}", file.display())),
            Ok(config) => {
                failures.extend(mismatches(&file, &expected, &config.warnings));
                assert!(config.route_table().contains("warning: "));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn unreadable_file_is_one_error_naming_it() {
    let errors = load(Path::new("does/not/exist.yaml")).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors
        .to_string()
        .starts_with("does/not/exist.yaml: cannot read the file"));
}
