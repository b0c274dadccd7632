import t from "tap";
import { MetricsRegistry } from "../../lib/metrics.js";
import { SignInThrottle } from "../../gateway/dashboard/sign-in-guard.js";
import { esc, html } from "../../gateway/dashboard/html.js";

// The Prometheus text format of the registry, the sign-in throttle's counting, and the
// dashboard's escaping of every interpolated value.

t.test("counters, gauges and histograms render in the text format", async (t) => {
  const r = new MetricsRegistry();
  const c = r.counter("x_total", "things", ["model"]);
  c.inc({ model: 'a"b\\c' });
  c.inc({ model: 'a"b\\c' }, 2);
  const h = r.histogram("lat_seconds", "latency", ["model"], [0.1, 1]);
  h.observe({ model: "m" }, 0.05);
  h.observe({ model: "m" }, 0.5);
  h.observe({ model: "m" }, 5);
  r.collected("g", "gauge", "gauge", [], () => [{ labels: {}, value: 7 }]);
  const text = r.render();
  t.match(text, '# TYPE x_total counter\nx_total{model="a\\"b\\\\c"} 3');
  t.match(text, 'lat_seconds_bucket{model="m",le="0.1"} 1');
  t.match(text, 'lat_seconds_bucket{model="m",le="1"} 2');
  t.match(text, 'lat_seconds_bucket{model="m",le="+Inf"} 3');
  t.match(text, 'lat_seconds_sum{model="m"} 5.55');
  t.match(text, 'lat_seconds_count{model="m"} 3');
  t.match(text, "# TYPE g gauge\ng 7");
});

t.test("sign-in throttle: the limit per account, five times it per address", async (t) => {
  const th = new SignInThrottle(2, 1000);
  const keys = ["account:a", "address:1"];
  t.ok(th.allowed(keys, 0));
  th.failed(keys, 0);
  t.ok(th.allowed(keys, 1), "one failure: allowed");
  th.failed(keys, 1);
  t.notOk(th.allowed(keys, 2), "the limit reached");
  t.ok(th.allowed(["account:b", "address:1"], 2), "another account from the same address");
  t.ok(th.allowed(keys, 1002), "the window passed");
  for (let i = 0; i < 9; i++) th.failed([`account:${i}`, "address:2"], 5);
  t.ok(th.allowed(["account:z", "address:2"], 5), "9 failures from one address: under 10");
  th.failed(["account:y", "address:2"], 5);
  t.notOk(th.allowed(["account:z", "address:2"], 5), "10: the address is throttled");
  const small = new SignInThrottle(1, 1000, 3);
  for (let i = 0; i < 10; i++) small.failed([`account:${i}`], 0);
  t.ok(small.allowed(["account:0"], 0), "bounded: the oldest entries went");
});

t.test("the dashboard escapes every value it interpolates", async (t) => {
  const evil = `<img src=x onerror=alert(1)>"'&`;
  t.equal(esc(evil), "&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;");
  t.equal(html`<td>${evil}</td>`.value, `<td>${esc(evil)}</td>`);
  t.equal(html`<p>${[evil, html`<b>ok</b>`]}</p>`.value, `<p>${esc(evil)}<b>ok</b></p>`, "arrays: text escaped, markup kept");
});
