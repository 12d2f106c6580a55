//! Configuration parsing: any text as YAML config, with a fixed environment for
//! `${NAME}` / `${NAME:-default}` expansion. Never a panic: errors are reported with
//! positions; a valid config renders its route table.
#![no_main]

use idem::config::Config;
use libfuzzer_sys::fuzz_target;

fn env(name: &str) -> Option<String> {
    match name {
        "IDEM_TOKEN" => Some("s3cret".to_owned()),
        "EMPTY" => Some(String::new()),
        "PORT" => Some("6379".to_owned()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_yaml_str_with_env(text, None, env) {
        Ok(config) => {
            let _ = config.route_table();
        }
        Err(errors) => {
            let _ = errors.to_string();
        }
    }
});
