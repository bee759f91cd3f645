#!/usr/bin/env python3
"""The adaptive benchmark's analysis: 100 ms bins, the targets, the plot.

    analyze.py --scenario NAME --prefix DIR/NAME --c 10 [--changes 15:5,30:10]
               --clients 50 --duration 30 --service-ms 20 [--min-in-flight 1]
               [--rule adaptive] [--info 'key=value' ...]

Reads PREFIX.requests.csv, PREFIX.samples.csv and PREFIX.refusal.txt (as
load.py writes them) and writes PREFIX.csv (one row per 100 ms bin),
PREFIX.txt (the summary, also printed) and PREFIX.png (4 panels; skipped
with a message when matplotlib cannot be imported). Can be run again on the
same files to redo the summary and the plot.

Bins: row t covers answers that ended in [t, t + 0.1) s after the load began;
limit and the upstream's figures are the samples taken at t + 0.1 (the
upstream's in-flight both as sampled then and time-averaged over the bin).
"""
import argparse
import csv
import math
import os
import sys

BIN = 0.1


def pct(sorted_values, p):
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(p / 100.0 * len(sorted_values)) - 1)]


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def fmt(x, spec=".1f", none="-"):
    return none if x is None else format(x, spec)


class Data:
    def __init__(self, a):
        self.a = a
        self.nbins = int(round(a.duration / BIN))
        n = self.nbins
        self.ok = [0] * n
        self.ok_lat = [[] for _ in range(n)]
        self.ref = [0] * n
        self.ref_lat = [[] for _ in range(n)]
        self.other = [0] * n
        self.status = {}
        self.all_ref_lat = []
        self.all_ok_lat = []
        with open(a.prefix + ".requests.csv") as f:
            for row in csv.DictReader(f):
                t, lat, st = float(row["t_end"]), float(row["latency_ms"]), int(row["status"])
                self.status[st] = self.status.get(st, 0) + 1
                k = int(t / BIN)
                if k >= n:
                    continue  # answered after the end (the last requests in flight)
                if 200 <= st < 300:
                    self.ok[k] += 1
                    self.ok_lat[k].append(lat)
                    self.all_ok_lat.append(lat)
                elif st in (503, 429):
                    self.ref[k] += 1
                    self.ref_lat[k].append(lat)
                    self.all_ref_lat.append(lat)
                else:
                    self.other[k] += 1
        self.limit = [None] * n
        self.inflight = [None] * n
        self.inflight_avg = [None] * n
        self.inflight_max = [None] * n
        self.queued = [None] * n
        self.c = [None] * n
        self.service_ms = []
        with open(a.prefix + ".samples.csv") as f:
            for row in csv.DictReader(f):
                k = int(round(float(row["t"]) / BIN)) - 1
                if not 0 <= k < n:
                    continue
                self.limit[k] = num(row["limit"])
                self.inflight[k] = num(row["in_flight"])
                self.inflight_avg[k] = num(row["in_flight_avg"])
                self.inflight_max[k] = num(row.get("in_flight_max", ""))
                self.queued[k] = num(row["queued"])
                self.c[k] = num(row["c"])
                if num(row["service_ms_mean"]) is not None:
                    self.service_ms.append(num(row["service_ms_mean"]))
        # c as scheduled, where a sample is missing
        for k in range(n):
            if self.c[k] is None:
                self.c[k] = float(self.c_at(k * BIN))
        # the in-flight the checks use: time-averaged over the bin, else the sample
        self.load = [self.inflight_avg[k] if self.inflight_avg[k] is not None else self.inflight[k]
                     for k in range(n)]
        try:
            self.refusal = open(a.prefix + ".refusal.txt", "rb").read()
        except OSError:
            self.refusal = b""

    def c_at(self, t):
        c = self.a.c
        for at, v in self.a.change_list:
            if t >= at:
                c = v
        return c

    def rng(self, t0, t1):
        return range(max(0, int(round(t0 / BIN))), min(self.nbins, int(round(t1 / BIN))))

    def mean_of(self, series, t0, t1):
        return mean(series[k] for k in self.rng(t0, t1))

    def rate(self, counts, t0, t1):
        r = self.rng(t0, t1)
        return sum(counts[k] for k in r) / (len(r) * BIN) if len(r) else None

    def rolling(self, series, k, width=10):
        return mean(series[j] for j in range(k, min(self.nbins, k + width)))

    def settled_at(self, series, bound, t0, t1, width=10):
        """First t in [t0, t1) from which every 1 s window (starting in
        [t, t1 - 1 s]) averages at most bound; None if none does."""
        ks = list(self.rng(t0, t1 - width * BIN + BIN / 2))
        if not ks:
            return None
        last_bad = None
        for k in ks:
            m = self.rolling(series, k, width)
            if m is None or m > bound:
                last_bad = k
        if last_bad is None:
            return t0
        if last_bad == ks[-1]:
            return None
        return (last_bad + 1) * BIN

    def first_at_least(self, counts, bound_per_s, t0, t1, width=10):
        for k in self.rng(t0, t1 - width * BIN + BIN / 2):
            if sum(counts[j] for j in range(k, k + width)) / (width * BIN) >= bound_per_s:
                return k * BIN
        return None


def checks(d, a):
    """Returns the list of (verdict, text); verdict PASS, FAIL, N/A or INFO."""
    out = []
    c0 = a.c
    cap = c0 / (a.service_ms / 1000.0) if a.service_ms else math.inf
    have_limit = any(x is not None for x in d.limit)
    answers = sum(d.ok) + sum(d.ref) + sum(d.other)
    refused = sum(d.ref)

    def check(ok, text):
        out.append(("PASS" if ok else "FAIL", text))

    def info(text):
        out.append(("INFO", text))

    def na(text):
        out.append(("N/A", text))

    def refusal_latency(t0=0.0, t1=None):
        t1 = a.duration if t1 is None else t1
        lat = sorted(x for k in d.rng(t0, t1) for x in d.ref_lat[k])
        p99 = pct(lat, 99)
        if p99 is None:
            na(f"refusals answered in < 1 ms at p99: no refusal in {t0:g}-{t1:g} s")
        else:
            check(p99 < 1.0, f"refusal p99 latency over {t0:g}-{t1:g} s: {p99:.3f} ms (< 1 ms; "
                              f"p50 {pct(lat, 50):.3f}, max {lat[-1]:.3f}, n={len(lat)})")

    def refusal_form():
        head = d.refusal.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        body = d.refusal.split(b"\r\n\r\n", 1)[1].decode("utf-8", "replace") if b"\r\n\r\n" in d.refusal else ""
        if not head:
            na("a refusal's form: no refusal seen")
            return
        status = head[9:12]
        retry = any(l.lower().startswith("retry-after:") for l in head.split("\r\n"))
        import json
        try:
            kind = json.loads(body).get("type", "")
        except ValueError:
            kind = ""
        ok = status == "503" and retry and kind.endswith("overloaded")
        check(ok, f"refusal form: status {status}, Retry-After {'present' if retry else 'MISSING'}, "
                  f"type {kind or '(none)'!r} (want 503, Retry-After, type ending 'overloaded')")

    def limit_info(t0, t1):
        if have_limit:
            xs = [d.limit[k] for k in d.rng(t0, t1) if d.limit[k] is not None]
            if xs:
                info(f"limit over {t0:g}-{t1:g} s: mean {mean(xs):.1f}, min {min(xs):g}, max {max(xs):g}")
        else:
            info(f"limit: no sluice_adaptive_limit{{rule=\"{a.rule}\"}} gauge on /metrics (not an adaptive build or rule?)")

    s = a.scenario
    if s in ("converge", "baseline"):
        bound = 1.5 * c0
        m = d.mean_of(d.load, 10, a.duration)
        if s == "converge":
            st = d.settled_at(d.load, bound, 0, a.duration)
            check(st is not None and st <= 10.0,
                  f"in-flight settles within 1.5c = {bound:g}: every 1 s mean from t = {fmt(st, '.1f', 'never')} s on (<= 10 s)")
            check(m is not None and m <= bound, f"mean in-flight over 10-{a.duration:g} s: {fmt(m, '.2f')} (<= {bound:g})")
            g = d.rate(d.ok, 10, a.duration)
            check(g is not None and g >= 0.8 * cap, f"goodput over 10-{a.duration:g} s: {fmt(g, '.0f')}/s "
                                                     f"(>= 80 % of c/service = {0.8 * cap:.0f}/s)")
            refusal_latency()
            refusal_form()
        else:
            check(m is not None and m >= 0.9 * a.clients,
                  f"no limiting: mean in-flight over 10-{a.duration:g} s: {fmt(m, '.2f')} (~ {a.clients} clients, >= {0.9 * a.clients:g})")
            info(f"goodput over 10-{a.duration:g} s: {fmt(d.rate(d.ok, 10, a.duration), '.0f')}/s "
                 f"(c/service = {cap:.0f}/s); 2xx mean latency {fmt(mean(d.all_ok_lat), '.1f')} ms")
            check(refused == 0, f"refusals: {refused} (0: the 1000-permit rule never refuses)")
        limit_info(10, a.duration)
    elif s == "degrade":
        (t_half, c_half), (t_back, _c_back) = a.change_list[:2]
        b0, b1 = 1.5 * c0, 1.5 * c_half
        m0 = d.mean_of(d.load, 10, t_half)
        check(m0 is not None and m0 <= b0, f"before the halving, mean in-flight over 10-{t_half:g} s: {fmt(m0, '.2f')} (<= {b0:g})")
        st = d.settled_at(d.load, b1, t_half, t_back)
        took = None if st is None else st - t_half
        check(took is not None and took <= 5.0,
              f"follows the halving (c={c_half}): every 1 s mean in-flight <= {b1:g} from {fmt(took, '.1f', 'never')} s after t = {t_half:g} s (<= 5 s)")
        m1 = d.mean_of(d.load, t_half + 5, t_back)
        check(m1 is not None and m1 <= b1, f"mean in-flight over {t_half + 5:g}-{t_back:g} s: {fmt(m1, '.2f')} (<= {b1:g})")
        if have_limit:
            lt = d.settled_at(d.limit, b1, t_half, t_back)
            info(f"the limit's 1 s mean stays <= {b1:g} from {fmt(None if lt is None else lt - t_half, '.1f', 'never')} s after the halving")
        g = d.rate(d.ok, t_back + 10, a.duration)
        check(g is not None and g >= 0.8 * cap, f"goodput back within 10 s of recovery: {fmt(g, '.0f')}/s over "
                                                 f"{t_back + 10:g}-{a.duration:g} s (>= {0.8 * cap:.0f}/s)")
        fr = d.first_at_least(d.ok, 0.8 * cap, t_back, a.duration)
        info(f"first 1 s window after t = {t_back:g} s with goodput >= {0.8 * cap:.0f}/s starts "
             f"{fmt(None if fr is None else fr - t_back, '.1f', 'never')} s after the recovery")
        info(f"goodput while halved ({t_half + 5:g}-{t_back:g} s): {fmt(d.rate(d.ok, t_half + 5, t_back), '.0f')}/s "
             f"(c/service = {c_half / (a.service_ms / 1000.0):.0f}/s)")
        refusal_latency()
        limit_info(t_half + 5, t_back)
    elif s == "delay":
        bound = 1.5 * c0
        peaks = [x for x in d.inflight_max if x is not None]
        check(peaks and max(peaks) <= 20,
              f"the upstream never held more than the limit's start: most in flight {fmt(max(peaks) if peaks else None, 'g')} (<= 20)")
        worst = None
        for k in d.rng(1, a.duration - 4):
            m = d.mean_of(d.load, k * BIN, k * BIN + 4)
            if m is not None and (worst is None or m > worst[1]):
                worst = (k * BIN, m)
        check(worst is not None and worst[1] <= bound,
              f"every 4 s window after 1 s: mean in-flight at most {fmt(worst and worst[1], '.2f')} "
              f"(from t = {fmt(worst and worst[0], '.1f')} s; <= {bound:g})")
        swing = None
        if have_limit:
            xs = [d.limit[k] for k in d.rng(10, a.duration) if d.limit[k] is not None]
            swing = max(xs) - min(xs) if xs else None
        converge = os.path.join(os.path.dirname(a.prefix), "converge.csv")
        if swing is not None and os.path.exists(converge):
            with open(converge) as f:
                ys = [float(r["limit"]) for r in csv.DictReader(f)
                      if r["limit"] and 10 <= float(r["t"]) < a.duration]
            theirs = max(ys) - min(ys) if ys else None
            check(theirs is not None and swing <= theirs,
                  f"the limit's swing over 10-{a.duration:g} s: {fmt(swing, 'g')} (converge's, without delay: {fmt(theirs, 'g')})")
        else:
            info(f"the limit's swing over 10-{a.duration:g} s: {fmt(swing, 'g')} (no converge.csv beside it to compare)")
        info(f"goodput over 10-{a.duration:g} s: {fmt(d.rate(d.ok, 10, a.duration), '.0f')}/s (c/service = {cap:.0f}/s)")
        limit_info(1, a.duration)
    elif s == "light":
        check(refused == 0, f"refusals over the {a.duration:g} s: {refused} (0)")
        info(f"goodput {fmt(d.rate(d.ok, 0, a.duration), '.1f')}/s; mean in-flight {fmt(d.mean_of(d.load, 0, a.duration), '.2f')}; "
             f"2xx mean latency {fmt(mean(d.all_ok_lat), '.1f')} ms")
        limit_info(0, a.duration)
    elif s == "noise":
        share = 100.0 * refused / answers if answers else None
        check(share is not None and share <= 1.0, f"refusals: {refused} of {answers} answers = {fmt(share, '.2f')} % (<= 1 %)")
        xs = [x for x in d.limit if x is not None]
        if xs:
            floor = [k * BIN for k in range(d.nbins) if d.limit[k] is not None and d.limit[k] <= a.min_in_flight]
            check(not floor, f"the limit never at its floor (min_in_flight = {a.min_in_flight:g}): lowest sampled "
                             f"{min(xs):g}" + (f", at the floor in {len(floor)} samples from t = {floor[0]:.1f} s" if floor else ""))
        else:
            na(f"the limit never at its floor: no sluice_adaptive_limit{{rule=\"{a.rule}\"}} gauge to sample")
        info(f"goodput {fmt(d.rate(d.ok, 0, a.duration), '.0f')}/s; mean in-flight {fmt(d.mean_of(d.load, 0, a.duration), '.2f')}; "
             f"2xx mean latency {fmt(mean(d.all_ok_lat), '.1f')} ms")
        limit_info(0, a.duration)
    elif s == "overload-noise":
        bound = 1.5 * c0
        m = d.mean_of(d.load, 10, a.duration)
        check(m is not None and m <= bound, f"mean in-flight over 10-{a.duration:g} s: {fmt(m, '.2f')} (<= {bound:g})")
        g = d.rate(d.ok, 10, a.duration)
        info(f"goodput over 10-{a.duration:g} s: {fmt(g, '.0f')}/s ({fmt(100 * g / cap if g else None, '.1f')} % "
             f"of c/service = {cap:.0f}/s; converge's 80 % is not a target here)")
        xs = [x for x in d.limit if x is not None]
        if xs:
            check(min(xs) > a.min_in_flight, f"the limit never at its floor (min_in_flight = {a.min_in_flight:g}): "
                                             f"lowest sampled {min(xs):g}")
        else:
            na(f"the limit never at its floor: no sluice_adaptive_limit{{rule=\"{a.rule}\"}} gauge to sample")
        refusal_latency()
        limit_info(10, a.duration)
    elif s == "upstream":
        rate = sum(d.ok) / a.duration
        info(f"upstream served {rate:.0f} requests/s ({sum(d.ok)} 2xx in {a.duration:g} s), using "
             f"{fmt(a.upstream_cpu_s, '.2f')} s of CPU ({fmt(100 * a.upstream_cpu_s / a.duration if a.upstream_cpu_s else None, '.0f')} % of a core)")
        per_core = sum(d.ok) / a.upstream_cpu_s if a.upstream_cpu_s else None
        check(per_core is not None and per_core >= 2000,
              f"upstream capacity: {fmt(per_core, '.0f')} requests/s per core of CPU "
              f"({fmt(1e6 * a.upstream_cpu_s / sum(d.ok) if sum(d.ok) and a.upstream_cpu_s else None, '.0f')} us a request; >= 2000/s)")
        lat = sorted(d.all_ok_lat)
        info(f"client-measured latency at this load: p50 {fmt(pct(lat, 50), '.3f')} ms, p99 {fmt(pct(lat, 99), '.3f')} ms")
    if s != "light" and s != "noise" and s != "upstream":
        info(f"refusals {refused} of {answers} answers ({100.0 * refused / answers if answers else 0:.1f} %)")
    if sum(d.other):
        out.append(("WARN", f"{sum(d.other)} answers neither 2xx nor a refusal: "
                            + ", ".join(f"{k or 'no answer'}: {v}" for k, v in sorted(d.status.items())
                                        if not (200 <= k < 300 or k in (503, 429)))))
    return out


def write_csv(d, path):
    with open(path, "w") as f:
        f.write("t,limit,upstream_in_flight,upstream_c,lat_2xx_mean_ms,lat_503_p99_ms,goodput_per_s,"
                "refused_per_s,upstream_in_flight_avg,upstream_queued,lat_2xx_p99_ms,other_per_s\n")
        for k in range(d.nbins):
            ok_lat = sorted(d.ok_lat[k])
            ref_lat = sorted(d.ref_lat[k])
            f.write(",".join([
                f"{k * BIN:.1f}", fmt(d.limit[k], "g", ""), fmt(d.inflight[k], "g", ""), fmt(d.c[k], "g", ""),
                fmt(mean(ok_lat), ".3f", ""), fmt(pct(ref_lat, 99), ".3f", ""),
                f"{d.ok[k] / BIN:g}", f"{d.ref[k] / BIN:g}", fmt(d.inflight_avg[k], ".3f", ""),
                fmt(d.queued[k], "g", ""), fmt(pct(ok_lat, 99), ".3f", ""), f"{d.other[k] / BIN:g}",
            ]) + "\n")


def plot(d, a, verdicts, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not importable: no plot (pip install --user matplotlib, then run analyze.py again)"
    t = [k * BIN + BIN for k in range(d.nbins)]
    tb = [k * BIN + BIN / 2 for k in range(d.nbins)]

    def roll(xs, w=10):
        out = []
        for k in range(len(xs)):
            win = [x for x in xs[max(0, k - w + 1):k + 1] if x is not None]
            out.append(sum(win) / len(win) if win else None)
        return out

    fig, ax = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    failed = [v for v, _ in verdicts if v == "FAIL"]
    judged = [v for v, _ in verdicts if v in ("PASS", "FAIL")]
    fig.suptitle(f"sluice adaptive bench: {a.scenario}  ({len(judged) - len(failed)}/{len(judged)} targets pass)"
                 + (f"\n{a.title}" if a.title else ""), fontsize=11)
    lim = [x if x is not None else math.nan for x in d.limit]
    if any(x is not None for x in d.limit):
        ax[0].step(t, lim, where="pre", label="limit (sluice_adaptive_limit)", color="C0")
    else:
        ax[0].text(0.5, 0.15, f'no sluice_adaptive_limit{{rule="{a.rule}"}} gauge on /metrics',
                   transform=ax[0].transAxes, ha="center", va="center", color="grey")
    ax[0].step(t, d.c, where="pre", label="upstream c", color="k", ls="--")
    ax[0].set_ylabel("requests")
    top = max([x for x in d.limit if x is not None] + [c for c in d.c if c < 1000] + [1])
    ax[0].set_ylim(0, top * 1.35)
    ax[0].legend(loc="upper right", fontsize=8)
    ax[0].set_title("limit and the upstream's c", fontsize=9, loc="left")

    ax[1].plot(tb, [x if x is not None else math.nan for x in d.inflight_avg], color="C1", lw=0.8,
               label="in-flight (time-avg over 100 ms)")
    ax[1].plot(tb, [x if x is not None else math.nan for x in roll(d.load)], color="C3", lw=1.5, label="1 s rolling mean")
    ax[1].step(t, [1.5 * c for c in d.c], where="pre", color="k", ls=":", lw=1, label="1.5 c")
    ax[1].step(t, d.c, where="pre", color="k", ls="--", lw=1, label="c")
    ax[1].set_ylabel("requests")
    top = max([x for x in d.load if x is not None] + [1.5 * c for c in d.c if c < 1000] + [1])
    ax[1].set_ylim(0, top * 1.35)  # room for the legend
    ax[1].legend(loc="upper right", fontsize=8)
    ax[1].set_title("upstream in-flight (accepted, not yet answered; queued included)", fontsize=9, loc="left")

    okm = [mean(x) for x in d.ok_lat]
    rp = [pct(sorted(x), 99) for x in d.ref_lat]
    ax[2].plot(tb, [x if x is not None else math.nan for x in okm], color="C2", lw=1, label="2xx mean")
    ax[2].plot(tb, [x if x is not None else math.nan for x in rp], ".", color="C3", ms=2.5, label="refusal p99 (per bin)")
    ax[2].axhline(1.0, color="C3", ls=":", lw=1, label="1 ms")
    ax[2].axhline(a.service_ms, color="k", ls="--", lw=1, label=f"service time {a.service_ms:g} ms")
    ax[2].set_yscale("log")
    ax[2].set_ylabel("ms (client-measured)")
    ax[2].legend(loc="upper right", fontsize=8)
    ax[2].set_title("latency", fontsize=9, loc="left")

    ax[3].plot(tb, [x / BIN for x in d.ok], color="C2", lw=0.5, alpha=0.5)
    ax[3].plot(tb, [x / BIN if x is not None else math.nan for x in roll(d.ok)], color="C2", lw=1.5, label="goodput 2xx/s (1 s mean)")
    ax[3].plot(tb, [x / BIN for x in d.ref], color="C3", lw=0.5, alpha=0.5)
    ax[3].plot(tb, [x / BIN if x is not None else math.nan for x in roll(d.ref)], color="C3", lw=1.5, label="refusals/s (1 s mean)")
    if sum(d.other):
        ax[3].plot(tb, [x / BIN for x in d.other], color="C7", lw=1, label="other/s")
    if a.service_ms and a.scenario in ("converge", "baseline", "degrade"):
        ax[3].step(t, [0.8 * c / (a.service_ms / 1000.0) for c in d.c], where="pre", color="k", ls=":", lw=1,
                   label="80 % of c/service")
    ax[3].set_ylabel("per second")
    ax[3].set_ylim(bottom=0)
    ax[3].set_xlabel("s since the load began")
    ax[3].legend(loc="upper right", fontsize=8)
    ax[3].set_title("goodput and refusals (thin: per 100 ms bin)", fontsize=9, loc="left")
    for x in ax:
        x.grid(alpha=0.3)
        for at, _ in a.change_list:
            x.axvline(at, color="grey", lw=0.8)
    ax[3].set_xlim(0, a.duration)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--c", type=int, required=True)
    ap.add_argument("--changes", default="", help="t:c,... e.g. 15:5,30:10")
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--service-ms", type=float, default=20.0)
    ap.add_argument("--min-in-flight", type=float, default=1)
    ap.add_argument("--rule", default="adaptive")
    ap.add_argument("--upstream-cpu-s", type=float, default=None, help="the upstream's CPU seconds in the run")
    ap.add_argument("--title", default="")
    ap.add_argument("--info", action="append", default=[], help="a line for the summary's header")
    a = ap.parse_args()
    a.change_list = [(float(x.split(":")[0]), int(x.split(":")[1])) for x in a.changes.split(",") if x]
    d = Data(a)
    v = checks(d, a)
    write_csv(d, a.prefix + ".csv")
    note = plot(d, a, v, a.prefix + ".png")
    lines = [f"sluice adaptive bench: {a.scenario}"]
    lines += [f"  {x}" for x in a.info]
    st = ", ".join(f"{k or 'no answer'}: {n}" for k, n in sorted(d.status.items()))
    lines.append(f"  answers by status: {st or 'none'}")
    if d.service_ms:
        lines.append(f"  upstream service time actually slept: mean {mean(d.service_ms):.2f} ms (asked {a.service_ms:g})")
    lines.append("")
    for verdict, text in v:
        lines.append(f"  {verdict:4}  {text}")
    judged = [x for x, _ in v if x in ("PASS", "FAIL")]
    lines.append("")
    lines.append(f"  {judged.count('PASS')}/{len(judged)} targets pass"
                 + (f"; {sum(1 for x, _ in v if x == 'N/A')} not measurable" if any(x == "N/A" for x, _ in v) else ""))
    lines.append(f"  files: {a.prefix}.csv, {a.prefix}.txt" + ("" if note else f", {a.prefix}.png"))
    if note:
        lines.append(f"  {note}")
    text = "\n".join(lines) + "\n"
    with open(a.prefix + ".txt", "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
