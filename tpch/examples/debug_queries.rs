use datafusion::prelude::SessionConfig;
use std::time::Duration;
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let root = std::env::args().nth(1).unwrap();
    let ctx = ooode_providers::ooode_context(SessionConfig::new().with_target_partitions(2));
    for t in ooode_tpch::tables::TABLES {
        ctx.sql(&format!(
            "CREATE EXTERNAL TABLE {} STORED AS OOODE LOCATION '{root}/ooode/{}'",
            t.name, t.name
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    }
    for setting in std::env::args().skip(3) {
        ctx.sql(&setting).await.unwrap().collect().await.unwrap();
    }
    for n in std::env::args().nth(2).unwrap().split(',') {
        let sql = std::fs::read_to_string(format!("tpch/queries/q{n}.sql")).unwrap();
        let sql = sql
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .last()
            .unwrap()
            .to_string();
        let plan = ctx
            .sql(&format!("EXPLAIN {sql}"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        if std::env::var_os("PLAN").is_some() {
            println!(
                "{}",
                datafusion::arrow::util::pretty::pretty_format_batches(&plan).unwrap()
            );
        }
        let r = tokio::time::timeout(Duration::from_secs(20), async {
            ctx.sql(&sql).await?.collect().await
        })
        .await;
        match r {
            Ok(Ok(b)) => println!(
                "q{n}: {} rows",
                b.iter().map(|b| b.num_rows()).sum::<usize>()
            ),
            Ok(Err(e)) => println!("q{n}: error {e}"),
            Err(_) => println!("q{n}: TIMEOUT"),
        }
    }
}
