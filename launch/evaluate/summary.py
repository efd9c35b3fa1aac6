"""What an evaluation found: evaluation.json, the front page (evaluation.md and .html, the transport check
in red where a variant did not use what it claims, links to the compare reports), and the final table."""
from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from urllib.parse import quote

from telemetry.analysis import evaluation_stats as st
from telemetry.analysis.report import md_escape
from telemetry.analysis.transport_claims import group_verdict

from .spec import Evaluation


def variant_verdicts(ev: Evaluation, results: list[dict]) -> dict[str, dict]:
    """Per variant: mismatch if any checked run mismatched, else unknown if any could not be checked, else ok;
    'not run' without a completed run."""
    out = {}
    for v in ev.variants:
        checks = [r["check"] for r in results if r["variant"] == v.name and r.get("check")]
        verdict = group_verdict(checks) if checks else "not run"
        out[v.name] = {"verdict": verdict, "expected": v.expect_transport, "detected": sorted({str(c["detected"]) for c in checks}),
                       "interfaces": sorted({i for c in checks for i in c["interfaces"]}),
                       "reasons": sorted({c["reason"] for c in checks if c.get("reason")})}
    return out


def statistics(ev: Evaluation, results: list[dict]) -> dict:
    out = {}
    for w in ev.workloads:
        # runs with a value, and those that missed their target (MLPerf may drop one as the slowest)
        mine = [r for r in results if r["workload"] == w.name and ((r.get("metric") or {}).get("value") is not None
                                                                   or (r.get("metric") or {}).get("converged") is False)]
        metric = next(({k: r["metric"].get(k) for k in ("name", "unit", "higher_is_better")} for r in mine
                       if r["metric"].get("value") is not None), None)
        runs = [{"variant": r["variant"], "round": r["round"], "value": r["metric"]["value"], "index": r["index"],
                 **({"converged": r["metric"]["converged"]} if "converged" in r["metric"] else {})} for r in mine]
        out[w.name] = {"metric": metric, **st.summarize_runs(runs, [v.name for v in ev.variants],
                                                              bool((metric or {}).get("higher_is_better")))}
    return out


def compare_reports(ev: Evaluation, results: list[dict], say) -> list[dict]:
    """One `python -m telemetry compare` per training workload (labels = variant names, the sweep workload's
    runs attached with --sweep when there is exactly one), and one per sweep workload not attached."""
    done = [r for r in results if r["status"] in ("completed", "target_reached")]
    training = [w for w in ev.workloads if not w.sweep]
    sweeps = [w for w in ev.workloads if w.sweep]
    attach = sweeps[0] if len(sweeps) == 1 and training else None
    reports = []
    for w in training + [s for s in sweeps if s is not attach]:
        labelled = [f"{r['variant']}={r['dir']}" for v in ev.variants for r in done
                    if r["workload"] == w.name and r["variant"] == v.name]
        variants = {a.split("=", 1)[0] for a in labelled}
        out = os.path.join(ev.out, "compare", w.name)
        entry = {"workload": w.name, "dir": out, "html": None, "md": None, "error": None,
                 "sweep": attach.name if attach and not w.sweep else None}
        if len(variants) < 2:
            entry["error"] = f"fewer than 2 variants have a completed run of {w.name}: nothing to compare"
            reports.append(entry)
            continue
        cmd = [sys.executable, "-m", "telemetry", "compare", *labelled, "--out", out, "--allow-mismatch"]
        cmd += [f"--expect-transport={v.name}={v.expect_transport}" for v in ev.variants if v.name in variants]
        if entry["sweep"]:
            cmd += [a for r in done if r["workload"] == attach.name and r["variant"] in variants
                    for a in ("--sweep", f"{r['variant']}={r['dir']}")]
        say(f"rendering the comparison of {w.name}" + (f" with the sweeps of workload {attach.name}" if entry["sweep"] else "")
            + f": python -m telemetry compare ... --out {out}")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            entry["error"] = "python -m telemetry compare did not finish within 900 s"
            reports.append(entry)
            continue
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            entry["error"] = next((ln.removeprefix("error: ") for ln in lines if ln.startswith("error:")),
                                  lines[-1] if lines else f"exit {proc.returncode}")
        else:
            entry["html"], entry["md"] = os.path.join(out, "compare.html"), os.path.join(out, "compare.md")
        reports.append(entry)
    return reports


_SCALE = {"MB/s": 1e3, "kB/s": 1e6}  # readable()'s units, from GB/s


def readable(s: dict) -> dict:
    """A workload's statistics for display: a busbw in GB/s with a value below 0.01 (a slow lab link) is shown
    in MB/s, or kB/s where every value is below 0.001 (`0.0005685 GB/s` read as 568.5 kB/s). A 1gbit variant
    beside 20mbit and 5mbit ones kept GB/s for all: `0.1979`, `0.002302`, `0.0005788` (round 8); now 197.9, 2.302
    and 0.5788 MB/s. evaluation.json keeps GB/s."""
    m = s.get("metric") or {}
    values = [v for d in s["variants"].values() for v in d.get("values") or []]
    if m.get("unit") != "GB/s" or not values or min(abs(v) for v in values) >= 0.01:
        return s
    unit = "MB/s" if max(abs(v) for v in values) >= 0.001 else "kB/s"
    k = _SCALE[unit]

    def scale(x):
        return [scale(v) for v in x] if isinstance(x, list) else x * k if isinstance(x, (int, float)) else x
    keys = ("mean", "sd", "mlperf_mean", "mean_interval", "values")
    variants = {n: {**d, **{key: scale(d.get(key)) for key in keys}} for n, d in s["variants"].items()}
    ranking = [{**r, "value": scale(r.get("value"))} for r in s.get("ranking") or []]
    return {**s, "metric": {**m, "unit": unit}, "variants": variants, "ranking": ranking}


def no_value_reason(record: dict, workload: str, variant: str) -> str:
    """Why a variant has no value for a workload: no completed run (how many did not complete), else the
    runs' own reason (no timed steps, a missed target)."""
    mine = [r for r in record["runs"] if r["workload"] == workload and r["variant"] == variant]
    done = [r for r in mine if r.get("status") in ("completed", "target_reached")]
    if not done:
        return (f"no completed run ({len(mine)} of {len(mine)} did not complete)" if mine
                else "no run (the evaluation stopped before it)")
    reasons = list(dict.fromkeys(str((r.get("metric") or {}).get("reason")) for r in done
                                 if (r.get("metric") or {}).get("reason")))
    return "; ".join(reasons) or "no value"


def _fmt_stat(d: dict, why: str = "") -> str:
    if not d["n"]:
        return f"n/a: {why}" if why else "n/a"
    text = st.fmt(d["mean"]) + (f" ± {st.fmt(d['sd'], 2)}" if d["sd"] is not None else "") + f" (n={d['n']})"
    return text


def fmt_diff(p: dict) -> tuple[str, str]:
    pct = "n/a" if p["pct"] is None else f"{p['pct'] * 100:+.1f}%"
    if p["pct_interval"]:
        lo, hi = p["pct_interval"]
        ci = f"[{lo * 100:+.1f}%, {hi * 100:+.1f}%]" + ("" if p.get("excludes_zero") else " (includes 0)")
        if lo < -1 and p.get("ratio_pct_interval"):  # the same runs as a ratio bound the fall (round 8 of the lab)
            rlo, rhi = p["ratio_pct_interval"]
            ci += (f" (below -100%, a value under zero only as a difference of the means; as a ratio of the runs "
                   f"(Welch on their logs): [{rlo * 100:+.1f}%, {rhi * 100:+.1f}%])")
        elif lo < -1:  # every metric (time, busbw) is positive: a fall of over 100% is the t-interval's width alone
            ci += " (below -100%, a value under zero: the runs spread too widely to bound a fall; more repeats narrow it)"
    else:
        ci = f"n/a: {p['reason']}" if p.get("reason") else "n/a"
    return pct, ci


def _vs_text(s: dict, record: dict, workload: str, base: str, name: str, pair: dict | None) -> str:
    """The difference to the baseline, or n/a with the side that has no value."""
    if pair and pair["pct"] is not None:
        return fmt_diff(pair)[0]
    if not s["variants"][name]["n"]:
        return "n/a: " + no_value_reason(record, workload, name).split(" (")[0]
    if not s["variants"][base]["n"]:
        return f"n/a: the baseline {base} has no value"
    return "n/a: the baseline's mean is 0" if pair else "n/a"


def lab_setting_text(key: str, value) -> str:
    """A lab setting as written, a rate in tc's bytes units named in bits too ('1mbps (8 Mbit/s)')."""
    from telemetry.analysis.rates import with_bits
    return with_bits(value) if key in ("rate", "slow_rate") and isinstance(value, str) else str(value)


def tables(ev: Evaluation, record: dict) -> list[tuple[str, list[str], list[list[str]], list[list[str]]]]:
    """(heading, header, rows, css classes per cell) for the page."""
    verdicts = record["verdicts"]
    out = []
    rows, classes = [], []
    for v in ev.variants:
        vd = verdicts[v.name]
        # a lab variant that names no rate runs unshaped links: say so, not "-" (a variant beside shaped ones)
        unshaped = ["lab rate none (unshaped, the default)"] if ev.launcher == "lab" and "rate" not in v.lab else []
        # beside a variant with its own layout, one that takes the file's says which (round 9: `fast` on the file's
        # 3 nodes read `lab rate 1.5Gbit` next to `lab nodes 2, lab nproc_per_node 2`)
        unshaped += [f"lab {k} {ev.options[k]} (the evaluation's)" for k in ("nodes", "nproc_per_node")
                     if ev.launcher == "lab" and k not in v.lab and any(k in o.lab for o in ev.variants)]
        setting = ", ".join(unshaped + [f"lab {k} {lab_setting_text(k, val)}" for k, val in v.lab.items()] + [f"{k}={val}" for k, val in record["env"][v.name].items()]
                            + ([f"hosts {','.join(v.hosts)}"] if v.hosts else [])) or "-"
        check = {"ok": "ok", "mismatch": "MISMATCH", "unknown": "not verified", "not run": "not run"}[vd["verdict"]]
        if vd["reasons"]:
            check += ": " + "; ".join(vd["reasons"])
        rows.append([v.name, setting, v.expect_transport, ", ".join(vd["detected"]) or "-",
                     ", ".join(vd["interfaces"]) or "-", check])
        classes.append([""] * 5 + [{"mismatch": "bad", "unknown": "unsure", "ok": "good"}.get(vd["verdict"], "")])
    out.append(("Variants and the transport check", ["variant", "setting", "expected", "transport used",
                                                     "interfaces used", "check"], rows, classes))
    for w in ev.workloads:
        s = readable(record["statistics"][w.name])
        m = s["metric"] or {"name": "metric", "unit": ""}
        many = any(d["n"] + d.get("not_converged", 0) >= st.MIN_REPEATS_FOR_INTERVAL for d in s["variants"].values())
        header = ["variant", f"{m['name']} ({m['unit']}), mean ± sd"] + (
            ["MLPerf mean (best, worst dropped)", "95% interval of the mean"] if many else []) \
            + [f"vs {ev.variants[0].name}" + ("" if m.get("higher_is_better") is None else
                                              " (higher is better)" if m["higher_is_better"] else " (lower is better)")]
        rows = []
        base = ev.variants[0].name
        for v in ev.variants:
            d = s["variants"][v.name]
            pair = next((p for p in s["differences"] if p["a"] == base and p["b"] == v.name), None)
            ci = d.get("mean_interval")
            olympic = st.fmt(d["mlperf_mean"]) + (f" ({d['not_converged']} missed the target, dropped as the slowest)"
                                                  if d.get("not_converged") and d["mlperf_mean"] is not None else
                                                  f": {d['mlperf_mean_reason']}" if d.get("mlperf_mean_reason")
                                                  and d.get("not_converged") else "")
            rows.append([v.name, _fmt_stat(d, no_value_reason(record, w.name, v.name))]
                        + ([olympic, f"[{st.fmt(ci[0])}, {st.fmt(ci[1])}]" if ci else "n/a"] if many else [])
                        + ["baseline" if v.name == base else _vs_text(s, record, w.name, base, v.name, pair)])
        out.append((f"Workload {w.name} ({'collective sweep' if w.sweep else 'training'})", header, rows, [[""] * len(header)] * len(rows)))
        drows = [[f"{p['b']} vs {p['a']}", fmt_diff(p)[0], fmt_diff(p)[1]]
                 + (list(fmt_diff(p["paired"])) if p.get("paired") else ["n/a", "n/a"]) for p in s["differences"]]
        ranking = s.get("ranking") or []
        if ranking:
            rrows = [[str(r["rank"]), r["variant"], str(r["round"]), st.fmt(r["value"]), r["dropped"] or ""]
                     for r in ranking]
            out.append((f"Workload {w.name}: every run ranked, {'highest' if m.get('higher_is_better') else 'lowest'} "
                        f"{m['name']} first", ["rank", "variant", "round", f"{m['name']} ({m['unit']})",
                                               "left out of the olympic mean"], rrows, [[""] * 5] * len(rrows)))
        out.append((f"Workload {w.name}: differences between variants (95% intervals: Welch t over the runs, "
                    f"needs {st.MIN_REPEATS_FOR_INTERVAL} runs each; paired t over the rounds, needs "
                    f"{st.MIN_REPEATS_FOR_INTERVAL} rounds with both)",
                    ["pair", "difference of means", "95% interval (Welch)", "mean difference per round",
                     "95% interval (paired by round)"], drows, [[""] * 5] * len(drows)))
    rows, classes = [], []
    shown = {w.name: (readable(record["statistics"][w.name]).get("metric") or {}).get("unit") for w in ev.workloads}
    for r in record["runs"]:
        c = r.get("check") or {}
        val = (r.get("metric") or {}).get("value")
        unit = shown.get(r["workload"]) or (r.get("metric") or {}).get("unit")
        if val is not None and unit in _SCALE:  # as its workload's table shows it (a slow link's kB/s)
            val *= _SCALE[unit]
        rows.append([str(r["index"]), str(r["round"]), r["workload"], r["variant"], r["status"] or "missing",
                     r["action"], "-" if r.get("duration_s") is None else f"{r['duration_s']:.1f}",
                     str(c.get("detected", "-")), c.get("verdict", "-").replace("mismatch", "MISMATCH"),
                     st.fmt(val) + (f" {unit}" if val is not None and unit else ""), os.path.relpath(r["dir"], ev.out)])
        classes.append([""] * 4 + ["" if r["status"] in ("completed", "target_reached") else "bad", "", "", "",
                                   {"mismatch": "bad", "unknown": "unsure", "ok": "good"}.get(c.get("verdict"), ""),
                                   "", ""])
    out.append(("Runs in the order they ran", ["#", "round", "workload", "variant", "status", "action", "time (s)",
                                               "transport", "check", "metric", "run directory"], rows, classes))
    return out


def banners(record: dict) -> list[tuple[str, str]]:
    """(css class, text) lines for the top of the page."""
    out = []
    for name, vd in record["verdicts"].items():
        if vd["verdict"] == "mismatch":
            out.append(("bad", f"TRANSPORT MISMATCH: variant {name} claims {vd['expected']} but did not use it: "
                               + "; ".join(vd["reasons"])))
        elif vd["verdict"] == "unknown":
            out.append(("unsure", f"transport of variant {name} not verified: " + "; ".join(vd["reasons"])))
    if record["failed"]:
        out.append(("bad", f"{len(record['failed'])} run(s) did not complete: "
                           + ", ".join(f"#{r['index']} {r['workload']}/{r['variant']} ({r['status'] or 'no run.json'})"
                                       for r in record["failed"])))
    for rep in record["reports"]:
        if rep["error"]:
            out.append(("bad", f"no comparison of {rep['workload']}: {rep['error']}"))
    if not any(c == "bad" for c, _ in out) and all(v["verdict"] == "ok" for v in record["verdicts"].values()):
        out.insert(0, ("good", "Transport check passed: every run used the transport its variant claims."))
    return out


CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
       "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}"
       "th{background:#f3f3f3}.banner{padding:.6em 1em;margin:.5em 0;font-weight:bold}"
       ".banner.bad{background:#fdd;border:2px solid #c00;color:#c00}.banner.unsure{background:#fff3d6;border:1px solid #b60}"
       ".banner.good{background:#e6f6e6;border:1px solid #2a2}td.bad{color:#c00;font-weight:bold;background:#fee}"
       "td.unsure{color:#b60}td.good{color:#070}iframe{width:100%;height:900px;border:1px solid #ccc}")


def write_pages(ev: Evaluation, record: dict) -> None:
    title = f"fabric-harness evaluation: {ev.name}"
    sub = (f"{len(ev.variants)} variants x {len(ev.workloads)} workloads x {ev.repeats} repeats, launcher "
           f"{ev.launcher}, interleaved rounds (variant order rotated each round)")
    md = [f"# {md_escape(title)}\n", f"{md_escape(sub)}\n"]
    body = [f"<h1>{html.escape(title)}</h1><p>{html.escape(sub)}</p>"]
    for cls, text in banners(record):
        mark = {"bad": "**[X] ", "unsure": "**[?] ", "good": "**[ok] "}[cls]
        md.append(f"> {mark}{md_escape(text)}**\n")
        body.append(f"<div class='banner {cls}'>{html.escape(text)}</div>")
    md.append("## Comparison reports\n")
    body.append("<h2>Comparison reports</h2><ul>")
    for rep in record["reports"]:
        if rep["html"]:
            rel = os.path.relpath(rep["html"], ev.out)
            rel_md = os.path.relpath(rep["md"], ev.out)
            note = f" (with the sweeps of workload {rep['sweep']})" if rep["sweep"] else ""
            md.append(f"- {md_escape(rep['workload'] + note)}: [{md_escape(rel_md)}](<{quote(rel_md)}>)")
            body.append(f"<li>{html.escape(rep['workload'] + note)}: <a href='{html.escape(rel)}'>{html.escape(rel)}</a></li>")
        else:
            md.append(f"- {md_escape(rep['workload'])}: none ({md_escape(rep['error'])})")
            body.append(f"<li>{html.escape(rep['workload'])}: none ({html.escape(rep['error'])})</li>")
    md.append("")
    body.append("</ul>")
    for heading, header, rows, classes in tables(ev, record):
        md += [f"## {md_escape(heading)}\n", "| " + " | ".join(map(md_escape, header)) + " |",
               "|" + "---|" * len(header)]
        for row, cls in zip(rows, classes):
            md.append("| " + " | ".join(f"**{md_escape(c)}**" if k == "bad" and c else md_escape(c)
                                        for c, k in zip(row, cls)) + " |")
        md.append("")
        body.append(f"<h2>{html.escape(heading)}</h2><table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
                    + "</tr>" + "".join("<tr>" + "".join(f"<td class='{k}'>{html.escape(c)}</td>" if k else
                                                         f"<td>{html.escape(c)}</td>" for c, k in zip(row, cls))
                                        + "</tr>" for row, cls in zip(rows, classes)) + "</table>")
    for rep in record["reports"]:
        if rep["html"]:
            rel = os.path.relpath(rep["html"], ev.out)
            body.append(f"<h2>Comparison: {html.escape(rep['workload'])}</h2><iframe src='{html.escape(rel)}'></iframe>")
    with open(os.path.join(ev.out, "evaluation.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(ev.out, "evaluation.html"), "w", encoding="utf-8") as f:
        f.write(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def final_table(ev: Evaluation, record: dict) -> str:
    """The console's closing table: one row per workload and variant."""
    header = ["workload", "variant", "expect", "transport", "check", "runs", "metric", "mean", "sd", "vs " + ev.variants[0].name]
    many = ev.repeats >= st.MIN_REPEATS_FOR_INTERVAL
    if many:
        header[-1:-1] = ["mlperf mean"]
        header.append("95% interval")
    rows = []
    for w in ev.workloads:
        s = readable(record["statistics"][w.name])
        m = s["metric"] or {"name": "-", "unit": ""}
        for v in ev.variants:
            d = s["variants"][v.name]
            vd = record["verdicts"][v.name]
            total = sum(1 for r in record["runs"] if r["workload"] == w.name and r["variant"] == v.name)
            pair = next((p for p in s["differences"] if p["a"] == ev.variants[0].name and p["b"] == v.name), None)
            pct, ci = fmt_diff(pair) if pair else ("baseline", "-")
            if pair and pair["pct"] is None:
                pct = _vs_text(s, record, w.name, ev.variants[0].name, v.name, pair)
            mean = st.fmt(d["mean"]) if d["n"] else "n/a: " + no_value_reason(record, w.name, v.name).split(" (")[0]
            row = [w.name, v.name, v.expect_transport, ",".join(vd["detected"]) or "-",
                   {"mismatch": "MISMATCH", "unknown": "unknown"}.get(vd["verdict"], vd["verdict"]),
                   f"{d['n']}/{total}", f"{m['name']} ({m['unit']})" if m["unit"] else m["name"],
                   mean, st.fmt(d["sd"], 2)]
            if many:
                row.append(st.fmt(d["mlperf_mean"]))
            row.append(pct)
            if many:
                row.append(ci)
            rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(c).ljust(wd) for c, wd in zip(r, widths)).rstrip() for r in [header] + rows]
    return "\n".join(lines)


def write_record(ev: Evaluation, record: dict) -> None:
    os.makedirs(ev.out, exist_ok=True)
    tmp = os.path.join(ev.out, "evaluation.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, default=str)
    os.replace(tmp, os.path.join(ev.out, "evaluation.json"))
