//! Random schemas and batches, loaded as tables and read back: same rows, ordered by the
//! clustering key, and every secondary index finds exactly the rows with its key.

use std::sync::Arc;

use arrow::array::*;
use arrow::compute::concat_batches;
use arrow::datatypes::*;
use arrow_row::{RowConverter, SortField};
use ooode::storage::{KeyEncoder, KeyRange, LoadOptions, Table, load_batches};
use proptest::prelude::*;

const TYPES: &[fn() -> DataType] = &[
    || DataType::Int32,
    || DataType::Int64,
    || DataType::Decimal128(15, 2),
    || DataType::Date32,
    || DataType::Utf8,
    || DataType::Utf8View,
    || DataType::LargeUtf8,
    || DataType::Binary,
    || DataType::FixedSizeBinary(3),
    || DataType::Boolean,
    || DataType::Float64,
    || DataType::UInt16,
];

fn make_array(t: &DataType, rows: usize, nullable: bool, seed: u64) -> ArrayRef {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut vals = Vec::with_capacity(rows);
    for _ in 0..rows {
        let v = next();
        vals.push(if nullable && v % 7 == 0 {
            None
        } else {
            Some(v >> 8)
        });
    }
    // Few distinct values so clustering keys and index keys repeat.
    let small = |v: u64| (v % 50) as i64 - 25;
    let text = |v: u64| "ab\0cé".repeat((v % 5) as usize) + &(v % 40).to_string();
    match t {
        DataType::Int32 => Arc::new(Int32Array::from_iter(
            vals.iter().map(|v| v.map(|v| small(v) as i32)),
        )),
        DataType::Int64 => Arc::new(Int64Array::from_iter(
            vals.iter().map(|v| v.map(|v| small(v) * 1_000_000_007)),
        )),
        DataType::UInt16 => Arc::new(UInt16Array::from_iter(
            vals.iter().map(|v| v.map(|v| v as u16)),
        )),
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter(vals.iter().map(|v| v.map(|v| small(v) as i128 * 12345)))
                .with_precision_and_scale(*p, *s)
                .unwrap(),
        ),
        DataType::Date32 => Arc::new(Date32Array::from_iter(
            vals.iter().map(|v| v.map(|v| small(v) as i32 * 400)),
        )),
        DataType::Float64 => Arc::new(Float64Array::from_iter(
            vals.iter().map(|v| v.map(|v| small(v) as f64 / 3.0)),
        )),
        DataType::Boolean => Arc::new(BooleanArray::from_iter(
            vals.iter().map(|v| v.map(|v| v % 2 == 0)),
        )),
        DataType::Utf8 => Arc::new(StringArray::from_iter(vals.iter().map(|v| v.map(text)))),
        DataType::LargeUtf8 => Arc::new(LargeStringArray::from_iter(
            vals.iter().map(|v| v.map(text)),
        )),
        DataType::Utf8View => {
            Arc::new(StringViewArray::from_iter(vals.iter().map(|v| v.map(text))))
        }
        DataType::Binary => Arc::new(BinaryArray::from_iter(
            vals.iter().map(|v| v.map(|v| text(v).into_bytes())),
        )),
        DataType::FixedSizeBinary(w) => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                vals.iter()
                    .map(|v| v.map(|v| (v as u32).to_le_bytes()[..*w as usize].to_vec())),
                *w,
            )
            .unwrap(),
        ),
        other => unreachable!("{other}"),
    }
}

/// Rows of `batch` as sortable byte strings (a multiset comparison independent of order).
fn sorted_rows(batch: &RecordBatch) -> Vec<Vec<u8>> {
    let fields = batch
        .schema()
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let conv = RowConverter::new(fields).unwrap();
    let rows = conv.convert_columns(batch.columns()).unwrap();
    let mut out: Vec<Vec<u8>> = rows.iter().map(|r| r.as_ref().to_vec()).collect();
    out.sort();
    out
}

fn roundtrip(
    type_ids: Vec<(usize, bool)>,
    rows: usize,
    batches: usize,
    cluster: Option<usize>,
    index: Option<usize>,
    page_size: usize,
    budget: usize,
) {
    let fields: Vec<Field> = type_ids
        .iter()
        .enumerate()
        .map(|(i, (t, nullable))| Field::new(format!("c{i}"), TYPES[*t](), *nullable))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let input: Vec<RecordBatch> = (0..batches)
        .map(|b| {
            let cols = schema
                .fields()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    make_array(
                        f.data_type(),
                        rows,
                        f.is_nullable(),
                        (b * 31 + i + 1) as u64 * 0x9E37_79B9,
                    )
                })
                .collect();
            RecordBatch::try_new(schema.clone(), cols).unwrap()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let ncols = schema.fields().len();
    let options = LoadOptions {
        page_size,
        clustering_key: cluster
            .map(|c| vec![format!("c{}", c % ncols)])
            .unwrap_or_default(),
        indexes: index
            .map(|c| vec![vec![format!("c{}", c % ncols)]])
            .unwrap_or_default(),
        memory_budget: budget,
        ..Default::default()
    };
    let manifest = load_batches(
        &path,
        schema.clone(),
        input.iter().cloned().map(Ok::<_, String>),
        options,
    )
    .unwrap();
    assert_eq!(manifest.row_count, (rows * batches) as u64);
    let table = Table::open(&path).unwrap();
    assert_eq!(table.schema().as_ref(), schema.as_ref());
    let pages: Vec<RecordBatch> = table.scan(None).collect::<Result<_, _>>().unwrap();
    let got = concat_batches(&schema, &pages).unwrap();
    let want = concat_batches(&schema, &input).unwrap();
    assert_eq!(sorted_rows(&got), sorted_rows(&want));
    if cluster.is_none() {
        // Without a clustering key rows keep their load order exactly.
        assert_eq!(got, want);
    }
    if let Some(c) = cluster {
        let c = c % ncols;
        let enc = KeyEncoder::new(&[schema.fields()[c].clone()]).unwrap();
        let keys = enc.encode_rows(&[got.column(c).clone()]).unwrap();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "not clustered");
    }
    if let Some(i) = index {
        let i = i % ncols;
        let enc = KeyEncoder::new(&[schema.fields()[i].clone()]).unwrap();
        let keys = enc.encode_rows(&[want.column(i).clone()]).unwrap();
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        let idx = table.index(&format!("c{i}")).unwrap();
        let clustering = table
            .index("clustering")
            .filter(|c| c.meta.columns == idx.meta.columns);
        for k in distinct.iter().take(12) {
            let fetched = table
                .lookup_rows(idx, KeyRange::point(k.clone()), None)
                .unwrap();
            if let Some(c) = clustering {
                let via_clustering = table
                    .lookup_rows(c, KeyRange::point(k.clone()), None)
                    .unwrap();
                assert_eq!(sorted_rows(&via_clustering), sorted_rows(&fetched));
            }
            let matching: Vec<u32> = (0..keys.len() as u32)
                .filter(|&r| &keys[r as usize] == k)
                .collect();
            let expect =
                arrow::compute::take_record_batch(&want, &UInt32Array::from(matching)).unwrap();
            assert_eq!(sorted_rows(&fetched), sorted_rows(&expect));
            assert_eq!(
                idx.count(&KeyRange::point(k.clone())).unwrap(),
                expect.num_rows() as u64
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_tables_round_trip(
        type_ids in prop::collection::vec((0..TYPES.len(), any::<bool>()), 1..7),
        rows in 0usize..1500,
        batches in 1usize..4,
        cluster in prop::option::of(0usize..8),
        index in prop::option::of(0usize..8),
        page_size in prop::sample::select(vec![4096usize, 8192, 65536]),
        spill in any::<bool>(),
    ) {
        // A tiny budget forces the external sort to spill and merge runs.
        let budget = if spill { 1 << 16 } else { 64 << 20 };
        roundtrip(type_ids, rows, batches, cluster, index, page_size, budget);
    }
}

#[test]
fn every_supported_type_with_nulls_and_spills() {
    let all: Vec<(usize, bool)> = (0..TYPES.len()).map(|t| (t, true)).collect();
    roundtrip(all, 5000, 3, Some(4), Some(1), 4096, 1 << 16);
}

#[test]
fn unsupported_type_names_the_column() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("ok", DataType::Int32, false),
        Field::new("tags", DataType::new_list(DataType::Utf8, true), true),
    ]));
    let dir = tempfile::tempdir().unwrap();
    let err =
        ooode::storage::TableWriter::create(dir.path().join("t"), schema, LoadOptions::default())
            .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("'tags'") && msg.contains("unsupported type"),
        "{msg}"
    );
}

#[test]
fn unknown_key_column_is_named() {
    let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
    let dir = tempfile::tempdir().unwrap();
    let options = LoadOptions {
        indexes: vec![vec!["nope".into()]],
        ..Default::default()
    };
    let msg = ooode::storage::TableWriter::create(dir.path().join("t"), schema, options)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("'nope'"), "{msg}");
}

#[test]
fn striped_over_three_paths() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, false),
    ]));
    let n = 20_000;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values((0..n).rev())),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("value {i}")),
            )),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = (0..3).map(|i| dir.path().join(format!("dev{i}"))).collect();
    let options = LoadOptions {
        clustering_key: vec!["k".into()],
        indexes: vec![vec!["v".into()]],
        data_paths: paths.clone(),
        stripe_unit: 2 * 8192,
        ..Default::default()
    };
    let m = load_batches(
        dir.path().join("t"),
        schema.clone(),
        [Ok::<_, String>(batch)],
        options,
    )
    .unwrap();
    assert_eq!(m.data_paths.len(), 3);
    for p in &paths {
        let sub: Vec<_> = std::fs::read_dir(p).unwrap().collect();
        assert_eq!(sub.len(), 1, "one table directory per data path");
    }
    let table = Table::open(dir.path().join("t")).unwrap();
    let keys: Vec<i64> = table
        .scan(Some(vec![0]))
        .flat_map(|b| {
            b.unwrap()
                .column(0)
                .as_primitive::<Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(keys, (0..n).collect::<Vec<_>>());
    let enc = KeyEncoder::new(&[schema.fields()[1].clone()]).unwrap();
    let key = enc
        .encode_row(&[Arc::new(StringArray::from(vec!["value 777"]))], 0)
        .unwrap();
    let ids = table
        .index_on(&["v"])
        .unwrap()
        .lookup(KeyRange::point(key))
        .unwrap();
    let rows = table.fetch_rows(&ids, None).unwrap();
    // k runs backwards from n - 1 while v counts up.
    assert_eq!(
        rows.column(0).as_primitive::<Int64Type>().values().to_vec(),
        vec![n - 1 - 777]
    );
}

/// Presorted input (a compaction's merge) goes to the heap as it comes, and input out of
/// clustering-key order is refused, naming the row, with nothing left behind.
#[test]
fn presorted_input_is_taken_in_order_and_checked() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Utf8, false),
    ]));
    let batch = |keys: Vec<Option<i64>>| {
        let n = keys.len();
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("v{i}")),
                )),
            ],
        )
        .unwrap()
    };
    let options = LoadOptions {
        clustering_key: vec!["k".into()],
        indexes: vec![vec!["v".into()]],
        presorted: true,
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    // NULL keys sort first; equal keys may repeat, also across batches.
    let sorted = [
        batch(vec![None, Some(1), Some(1), Some(5)]),
        batch(vec![Some(5), Some(9)]),
    ];
    let m = load_batches(
        dir.path().join("ok"),
        schema.clone(),
        sorted.into_iter().map(Ok::<_, String>),
        options.clone(),
    )
    .unwrap();
    assert_eq!(m.row_count, 6);
    let table = Table::open(dir.path().join("ok")).unwrap();
    let keys: Vec<Option<i64>> = table
        .scan(Some(vec![0]))
        .flat_map(|b| {
            let b = b.unwrap();
            let col = b.column(0).as_primitive::<Int64Type>().clone();
            col.iter().collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        keys,
        vec![None, Some(1), Some(1), Some(5), Some(5), Some(9)]
    );
    // Out of order within a batch, and across batches.
    for (name, batches) in [
        ("within", vec![batch(vec![Some(1), Some(3), Some(2)])]),
        (
            "across",
            vec![batch(vec![Some(1), Some(4)]), batch(vec![Some(3)])],
        ),
    ] {
        let e = load_batches(
            dir.path().join(name),
            schema.clone(),
            batches.into_iter().map(Ok::<_, String>),
            options.clone(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("out of clustering-key order at row 2"),
            "{name}: {e}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["ok"], "failed loads leave nothing behind");
}
