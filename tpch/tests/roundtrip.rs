//! Every column of every TPC-H table at SF 0.01 reads back equal to the generated batches, and
//! every index finds exactly the rows that carry its keys.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{SortColumn, concat_batches, lexsort_to_indices, take_record_batch};
use ooode::storage::{KeyEncoder, KeyRange, Table, load_batches};
use ooode_tpch::datagen::load_options;
use ooode_tpch::tables::{TABLES, generate, schema};

const SF: f64 = 0.01;

#[test]
fn all_tables_round_trip_with_indexes() {
    let dir = tempfile::tempdir().unwrap();
    for t in &TABLES {
        let schema = schema(t.name);
        let generated: Vec<RecordBatch> = generate(t.name, SF, 1000).map(Result::unwrap).collect();
        let path = dir.path().join(t.name);
        let manifest = load_batches(
            &path,
            schema.clone(),
            generated.iter().cloned().map(Ok::<_, String>),
            load_options(t),
        )
        .unwrap();
        let want = concat_batches(&schema, &generated).unwrap();
        assert_eq!(manifest.row_count, want.num_rows() as u64, "{}", t.name);

        // Expected: the generated rows ordered by the clustering key (a primary key: unique).
        let sort: Vec<SortColumn> = t
            .clustering_key
            .iter()
            .map(|c| SortColumn {
                values: want.column(schema.index_of(c).unwrap()).clone(),
                options: None,
            })
            .collect();
        let order = lexsort_to_indices(&sort, None).unwrap();
        let want = take_record_batch(&want, &order).unwrap();

        let table = Table::open(&path).unwrap();
        assert_eq!(table.schema().as_ref(), schema.as_ref());
        let pages: Vec<RecordBatch> = table.scan(None).map(Result::unwrap).collect();
        let got = concat_batches(&schema, &pages).unwrap();
        for (i, f) in schema.fields().iter().enumerate() {
            assert_eq!(
                got.column(i),
                want.column(i),
                "{}.{} differs",
                t.name,
                f.name()
            );
        }

        // Every secondary index: a sample of keys finds exactly the rows with that key.
        for cols in t.indexes {
            let idx = table.index_on(cols).unwrap();
            let ids: Vec<usize> = cols.iter().map(|c| schema.index_of(c).unwrap()).collect();
            let fields: Vec<_> = ids.iter().map(|&i| schema.fields()[i].clone()).collect();
            let key_cols: Vec<ArrayRef> = ids.iter().map(|&i| want.column(i).clone()).collect();
            let keys = KeyEncoder::new(&fields)
                .unwrap()
                .encode_rows(&key_cols)
                .unwrap();
            assert_eq!(idx.meta.tree.entries, want.num_rows() as u64);
            for probe in (0..keys.len()).step_by(keys.len() / 25 + 1) {
                let k = &keys[probe];
                let rows = idx.lookup(KeyRange::point(k.clone())).unwrap();
                let fetched = table.fetch_rows(&rows, None).unwrap();
                let expect: Vec<u32> = (0..keys.len() as u32)
                    .filter(|&r| &keys[r as usize] == k)
                    .collect();
                let expect = take_record_batch(&want, &UInt32Array::from(expect)).unwrap();
                assert_eq!(fetched, expect, "{} index {:?}", t.name, cols);
            }
        }

        // The clustering index: a point lookup reads only the pages that can hold the key.
        let idx = table.index("clustering").unwrap();
        assert_eq!(idx.meta.tree.entries, table.manifest().heap_pages);
        let first = t.clustering_key[0];
        let c = schema.index_of(first).unwrap();
        let probe_row = want.num_rows() / 2;
        let f = Arc::clone(&schema.fields()[c]);
        let key = KeyEncoder::new(&[f])
            .unwrap()
            .encode_row(&[want.column(c).clone()], probe_row)
            .unwrap();
        let pages = idx.lookup(KeyRange::prefix(key)).unwrap();
        assert!(
            !pages.is_empty() && pages.len() <= 3,
            "{} pages for one key",
            pages.len()
        );
    }
}
