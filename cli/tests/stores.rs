//! Tables in object storage through the shell, as a user types them: `http://` on a WebDAV
//! server and `az://` on Azure's emulator, both started on loopback
//! (`ooode_tpch::servers`; `.ci/run` installs them). datafusion-cli resolves only `s3://`,
//! `gs://` and `http(s)://` itself and knows only `aws.*` and `gcp.*` options; the shell
//! takes `az://` and the `azure.*` / `http.*` options too.

use std::process::Command;

fn ooode(commands: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ooode"));
    cmd.arg("-q");
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = cmd.output().expect("the ooode binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Copies 2000 rows to `url` with `options`, opens the table there and sums a range of it.
fn copy_open_query(url: &str, options: &str) -> (bool, String) {
    let sep = if options.is_empty() { "" } else { ", " };
    ooode(&[
        &format!(
            "COPY (SELECT value AS id, value % 10 AS grp FROM generate_series(1, 2000)) TO \
             '{url}' STORED AS OOODE OPTIONS ('ooode.clustering_key' 'id'{sep}{options})"
        ),
        &format!(
            "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION '{url}' {}",
            match options.is_empty() {
                true => String::new(),
                false => format!("OPTIONS ({options})"),
            }
        ),
        "SELECT COUNT(*) AS n, SUM(id) AS s FROM t WHERE id <= 500",
    ])
}

#[test]
fn tables_on_http_and_azure_through_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let dav = ooode_tpch::servers::webdav(&dir.path().join("dav")).unwrap();
    let _azurite = ooode_tpch::servers::azurite(&dir.path().join("azurite"), "ctr").unwrap();
    // 500 rows, 1 + ... + 500.
    let want = "| 500 | 125250 |";

    let http = format!("{}/t", dav.url);
    let (ok, out) = copy_open_query(&http, "'http.timeout' '30s'");
    assert!(ok && out.contains(want), "{out}");

    let (ok, out) = copy_open_query("az://ctr/t", "'azure.use_emulator' 'true'");
    assert!(ok && out.contains(want), "{out}");

    // Without options or AZURE_* variables: an error saying what to give, not a crash.
    let (ok, out) = ooode(&["CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION 'az://ctr/t'"]);
    assert!(
        !ok && out.contains("'azure.*' options") && out.contains("az://ctr"),
        "{out}"
    );

    // An option object_store does not know is named.
    let (ok, out) = ooode(&[
        "CREATE EXTERNAL TABLE t STORED AS OOODE LOCATION 'az://ctr/t' \
         OPTIONS ('azure.use_emulator' 'true', 'azure.bogus' '1')",
    ]);
    assert!(
        !ok && out.contains("unknown object store option 'azure.bogus'"),
        "{out}"
    );
}
