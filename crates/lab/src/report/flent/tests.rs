use std::collections::BTreeMap;
use std::io::Read as _;

use serde_json::{json, Value};

use super::*;

#[test]
fn utc_timestamps_as_flent_writes_them() {
    assert_eq!(iso_utc(0.0), "1970-01-01T00:00:00.000000Z");
    // a leap day, and half a second
    assert_eq!(iso_utc(951_782_400.5), "2000-02-29T00:00:00.500000Z");
    assert_eq!(iso_utc(1_709_164_800.0), "2024-02-29T00:00:00.000000Z");
    assert_eq!(iso_utc(1_795_728_217.25), "2026-11-26T21:23:37.250000Z");
}

/// Flent's aggregator, step 1 s, worked by hand (and checked against a transcription of
/// `TimeseriesAggregator.aggregate` run on the same samples).
#[test]
fn grid_interpolates_as_flent_does() {
    let a = [(0.5, 10.0), (1.0, 20.0), (2.0, 40.0), (9.0, 50.0)];
    assert_eq!(grid_len(9.0, 1.0), 9);
    let g = grid(&a, 1.0, 9);
    // x = 0: before the first sample, which is within half a step: its value
    assert_eq!(g[0], Some(10.0));
    // x = 1: the sample at 1 s is not later than x: between it and 2 s, 20
    assert_eq!(g[1], Some(20.0));
    // x = 2, 3: the next sample (9 s) is more than 5 steps away
    assert_eq!(g[2..4], [None, None]);
    // x = 4..8: 40 + (50 - 40) / 7 · (x - 2)
    for (k, v) in g.iter().enumerate().skip(4) {
        let want = 40.0 + 10.0 / 7.0 * (k as f64 - 2.0);
        assert!((v.unwrap() - want).abs() < 1e-12, "x={k}: {v:?}");
    }
    // past its last sample a series repeats it once, then has no value
    let b = grid(&[(0.0, 1.0), (2.0, 3.0)], 1.0, 9);
    assert_eq!(
        b,
        [
            Some(1.0),
            Some(2.0),
            Some(3.0),
            None,
            None,
            None,
            None,
            None,
            None
        ]
    );
    // a gap (NaN) at either end of an interval is a gap; the last sample after a gap
    // is not repeated (Flent: the previous grid value is null)
    let c = grid(&[(1.0, 1.0), (2.0, f64::NAN), (3.0, 3.0)], 1.0, 5);
    assert_eq!(c, [None; 5]);
    // unsorted input is sorted; no samples: all null
    assert_eq!(
        grid(&[(2.0, 3.0), (0.0, 1.0)], 1.0, 3),
        [Some(1.0), Some(2.0), Some(3.0)]
    );
    assert_eq!(grid(&[], 0.5, 2), [None, None]);
    assert_eq!(grid_len(0.0, 0.2), 1);
    assert_eq!(grid_len(1.0, 0.0), 1);
    assert_eq!(grid_len(1.01, 0.2), 6);
}

fn two_series() -> Recording {
    Recording {
        part: "p1".into(),
        dut: "weir:cbq".into(),
        run: 0,
        test: "tcp_nup".into(),
        test_parameters: BTreeMap::from([("upload_streams".to_string(), "2".to_string())]),
        hosts: vec!["10.77.0.2".into()],
        start_unix_s: 1_795_728_217.25,
        length_s: 1.5,
        step_s: 0.5,
        series: vec![
            // 1 s bins of 125 000 B and 250 000 B: 1 and 2 Mbit/s, at the bins' ends
            TimeSeries::goodput_mbps("TCP upload::1", "s1 (gold)", &[125_000, 250_000], 1000),
            TimeSeries::new(
                "VoIP delay (ms) c1",
                "c1, \"call\"",
                "ms",
                vec![(0.5, 20.0), (1.0, 30.0), (1.5, f64::NAN)],
            ),
        ],
    }
}

#[test]
fn goodput_at_each_bins_end() {
    let s = TimeSeries::goodput_mbps("TCP upload::1", "s1", &[12_500, 0, 25_000], 100);
    assert_eq!(s.units, "Mbits/s");
    // 12 500 B in 0.1 s = 1 Mbit/s; times in whole ms (0.3, not 0.30000000000000004)
    assert_eq!(s.points, [(0.1, 1.0), (0.2, 0.0), (0.3, 2.0)]);
}

#[test]
fn document_fields_by_hand() {
    let rec = two_series();
    let meta = BTreeMap::from([("host".to_string(), "lab1".to_string())]);
    let doc = document(&rec, "weir lab basic", &meta, "f.flent.gz");
    assert_eq!(doc["version"], json!(4));
    // t_max 2 s, step 0.5: 4 grid points
    assert_eq!(doc["x_values"], json!([0.0, 0.5, 1.0, 1.5]));
    // goodput samples at 1 s (1.0) and 2 s (2.0): x = 0 and 0.5 are more than half a
    // step before the first; 1.5 is half-way
    assert_eq!(
        doc["results"]["TCP upload::1"],
        json!([null, null, 1.0, 1.5])
    );
    // 0.5: the sample itself (between it and the next); 1.0: the next is a gap; 1.5: the
    // last sample is a gap
    assert_eq!(
        doc["results"]["VoIP delay (ms) c1"],
        json!([null, 20.0, null, null])
    );
    let t0 = 1_795_728_217.25;
    assert_eq!(
        doc["raw_values"]["TCP upload::1"],
        json!([{"t": t0 + 1.0, "val": 1.0}, {"t": t0 + 2.0, "val": 2.0}])
    );
    // the NaN sample is left out of the raw values
    assert_eq!(
        doc["raw_values"]["VoIP delay (ms) c1"],
        json!([{"t": t0 + 0.5, "val": 20.0}, {"t": t0 + 1.0, "val": 30.0}])
    );
    let m = &doc["metadata"];
    assert_eq!(m["NAME"], "tcp_nup");
    assert_eq!(m["TITLE"], "weir lab basic p1 weir:cbq run 1");
    assert_eq!(m["TIME"], "2026-11-26T21:23:37.250000Z");
    assert_eq!(m["T0"], m["TIME"]);
    assert_eq!(m["LENGTH"], json!(2));
    assert_eq!(m["TOTAL_LENGTH"], json!(1.5));
    assert_eq!(m["STEP_SIZE"], json!(0.5));
    assert_eq!(m["LOCAL_HOST"], "lab1");
    assert_eq!(m["HOSTS"], json!(["10.77.0.2"]));
    assert_eq!(m["HOST"], "10.77.0.2");
    assert_eq!(m["IP_VERSION"], json!(4));
    assert_eq!(m["DATA_FILENAME"], "f.flent.gz");
    assert_eq!(m["TEST_PARAMETERS"], json!({"upload_streams": "2"}));
    assert_eq!(
        m["SERIES_META"]["TCP upload::1"],
        json!({"UNITS": "Mbits/s", "WEIR_LABEL": "s1 (gold)"})
    );
    assert_eq!(m["WEIR"]["dut"], "weir:cbq");
    assert_eq!(m["WEIR"]["meta"]["host"], "lab1");
    assert!(m["FLENT_VERSION"].as_str().unwrap().starts_with("weir "));
    // every key Flent records is present
    for k in [
        "NAME",
        "HOST",
        "HOSTS",
        "TIME",
        "LOCAL_HOST",
        "TITLE",
        "NOTE",
        "LENGTH",
        "TOTAL_LENGTH",
        "STEP_SIZE",
        "TEST_PARAMETERS",
        "FLENT_VERSION",
        "IP_VERSION",
        "BATCH_NAME",
        "BATCH_TIME",
        "BATCH_TITLE",
        "BATCH_UUID",
        "DATA_FILENAME",
    ] {
        assert!(m.get(k).is_some(), "{k}");
    }
    // every series has as many grid values as there are x values
    let n = doc["x_values"].as_array().unwrap().len();
    for v in doc["results"].as_object().unwrap().values() {
        assert_eq!(v.as_array().unwrap().len(), n);
    }
}

#[test]
fn gzip_round_trip_and_files() {
    let rec = two_series();
    let empty = Recording {
        dut: "tc".into(),
        series: vec![TimeSeries::new("x", "x", "ms", vec![(1.0, f64::NAN)])],
        ..two_series()
    };
    let files = series_files("weir lab basic", &BTreeMap::new(), &[rec.clone(), empty]).unwrap();
    let names: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
    // the recording without a finite sample writes no Flent file
    assert_eq!(names, ["p1-weir_cbq-run1.flent.gz", "series.csv"]);
    let gz = &files[0].1;
    assert_eq!(gz[..2], [0x1f, 0x8b], "gzip magic");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        back,
        document(
            &rec,
            "weir lab basic",
            &BTreeMap::new(),
            "p1-weir_cbq-run1.flent.gz"
        )
    );
    let csv = String::from_utf8(files[1].1.clone()).unwrap();
    assert_eq!(
        csv,
        "part,dut,run,series,label,units,t_s,value\n\
         p1,weir:cbq,1,TCP upload::1,s1 (gold),Mbits/s,1,1\n\
         p1,weir:cbq,1,TCP upload::1,s1 (gold),Mbits/s,2,2\n\
         p1,weir:cbq,1,VoIP delay (ms) c1,\"c1, \"\"call\"\"\",ms,0.5,20\n\
         p1,weir:cbq,1,VoIP delay (ms) c1,\"c1, \"\"call\"\"\",ms,1,30\n\
         p1,weir:cbq,1,VoIP delay (ms) c1,\"c1, \"\"call\"\"\",ms,1.5,\n"
    );
    assert!(series_files("weir lab basic", &BTreeMap::new(), &[])
        .unwrap()
        .is_empty());
}
