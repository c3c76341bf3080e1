// The run page: every answer saved as soon as it is given (POST .../answers), photos uploaded
// from the camera (POST .../photos), sign-off and abandon through the same API the scripts use.
(function () {
  "use strict";
  const run = document.getElementById("run");
  if (!run) return;
  const api = run.dataset.api;
  const csrf = (run.querySelector("input[name=csrfmiddlewaretoken]") || {}).value || "";
  // Django's JavaScript catalogue (/jsi18n/, deferred: it may arrive after this script), looked
  // up when a text is needed; English without it.
  function gettext(text) { return window.gettext ? window.gettext(text) : text; }
  function interpolate(format, args) {
    if (window.interpolate) return window.interpolate(format, args);
    let i = 0;
    return format.replace(/%s/g, function () { return String(args[i++]); });
  }

  function drawCharts() {
    if (!window.Plotly) return;
    document.querySelectorAll(".effect-chart").forEach(function (box) {
      const key = box.id.replace(/^chart-/, "");
      const data = JSON.parse(document.getElementById(key).textContent);
      const traces = [];
      (data.gpus || []).forEach(function (g) {
        const x = g.bins.map(function (b) { return b.power_w; });
        traces.push({x: x, y: g.bins.map(function (b) { return b.before_c; }), name: interpolate(gettext("%s before"), [g.gpu]), mode: "lines+markers", line: {dash: "dot"}});
        traces.push({x: x, y: g.bins.map(function (b) { return b.after_c; }), name: interpolate(gettext("%s after"), [g.gpu]), mode: "lines+markers"});
      });
      Plotly.newPlot(box, traces, {
        margin: {l: 44, r: 8, t: 8, b: 36}, height: 260, legend: {orientation: "h", x: 0, y: -0.32, yanchor: "top"},
        xaxis: {title: {text: gettext("power (W)")}}, yaxis: {title: {text: gettext("°C under load")}},
      }, {displayModeBar: false, responsive: true, staticPlot: window.matchMedia("print").matches});
    });
  }
  // The charts' words come from the deferred catalogue, which has run by DOMContentLoaded.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawCharts);
  else drawCharts();
  run.querySelectorAll("[data-print]").forEach(function (button) {
    button.addEventListener("click", function () { window.print(); });
  });

  async function call(path, body, isForm) {
    const init = {method: "POST", credentials: "same-origin", headers: {"X-CSRFToken": csrf}};
    if (isForm) { init.body = body; } else { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
    const response = await fetch(api + path, init);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    return {ok: response.ok, status: response.status, data: data};
  }

  function problems(result) {
    if (!result.data) return interpolate(gettext("The portal did not answer (%s); try again."), [result.status]);
    const detail = (result.data.detail || []).map(function (d) { return d.msg; }).join(" ");
    return detail || result.data.error || interpolate(gettext("Error %s"), [result.status]);
  }

  function setStatus(li, text, bad) {
    const error = li.querySelector(".item-error");
    error.hidden = !bad;
    error.textContent = bad ? text : "";
    li.querySelector("[data-who]").textContent = bad ? gettext("not saved") : text;
    li.classList.toggle("saving", text === gettext("saving…"));
  }

  function progress(items) {
    const box = document.getElementById("progress");
    if (!box || !items) return;
    const answered = items.filter(function (i) { return i.answered_at; }).length;
    box.textContent = interpolate(gettext("%s of %s answered"), [answered, items.length]);
  }

  function valueOf(li) {
    const kind = li.dataset.kind;
    const key = li.dataset.key;
    if (kind === "check" || kind === "pass_fail" || kind === "choice") {
      const checked = li.querySelector("input[name='v-" + key + "']:checked");
      if (!checked) return null;
      if (kind === "check") return checked.value === "true";
      return checked.value;
    }
    const field = li.querySelector("[name='v-" + key + "']");
    if (!field || field.value.trim() === "") return null;
    if (kind === "number") { const n = Number(field.value); return Number.isFinite(n) ? n : field.value; }
    return field.value;
  }

  async function save(li) {
    const note = li.querySelector("[name='n-" + li.dataset.key + "']");
    setStatus(li, gettext("saving…"), false);
    const result = await call("/answers", {answers: [{item: li.dataset.key, value: valueOf(li), note: note ? note.value : ""}]});
    if (!result.ok) { setStatus(li, problems(result), true); return; }
    const item = result.data.items.find(function (i) { return i.key === li.dataset.key; });
    setStatus(li, item && item.answered_at ? interpolate(gettext("saved ✓ %s · %s"), [item.answered_by, item.answered_at.slice(11, 16)])
      : gettext("cleared"), false);
    li.classList.toggle("outcome-fail", item && item.value === "fail");
    progress(result.data.items);
  }

  const timers = new WeakMap();
  run.querySelectorAll("li.item").forEach(function (li) {
    li.addEventListener("change", function (event) {
      if (event.target.type === "file") return;
      clearTimeout(timers.get(li));
      save(li);
    });
    li.addEventListener("input", function (event) {
      if (event.target.tagName !== "TEXTAREA" && event.target.type !== "number") return;
      clearTimeout(timers.get(li));
      timers.set(li, setTimeout(function () { save(li); }, 800));
    });
    const file = li.querySelector("input[type=file]");
    if (file) file.addEventListener("change", async function () {
      if (!file.files.length) return;
      const form = new FormData();
      form.append("item", li.dataset.key);
      form.append("file", file.files[0]);
      setStatus(li, gettext("saving…"), false);
      const result = await call("/photos", form, true);
      file.value = "";
      if (!result.ok) { setStatus(li, problems(result), true); return; }
      const link = document.createElement("a");
      link.href = result.data.url;
      const img = document.createElement("img");
      img.className = "thumb"; img.src = result.data.url; img.alt = gettext("photo");
      link.appendChild(img);
      li.querySelector(".thumbs").appendChild(link);
      setStatus(li, gettext("photo saved ✓"), false);
      const fresh = await fetch(api, {credentials: "same-origin"});
      if (fresh.ok) progress((await fresh.json()).items);
    });
  });

  const complete = document.getElementById("complete");
  if (complete) complete.addEventListener("click", async function () {
    const error = document.getElementById("complete-error");
    complete.disabled = true;
    const result = await call("/complete", {signature: document.getElementById("signature").value});
    complete.disabled = false;
    if (result.ok) { window.location.reload(); return; }
    const lines = [];
    (result.data && result.data.detail || []).forEach(function (d) {
      const m = /^items\.(.+)$/.exec(d.loc);
      if (m) {
        const li = document.getElementById("item-" + m[1]);
        if (li) { setStatus(li, gettext("Required before sign-off."), true); }
      }
      lines.push(d.msg);
    });
    error.textContent = lines.join(" · ") || problems(result);
    error.hidden = false;
    const first = run.querySelector(".item-error:not([hidden])");
    if (first) first.closest("li").scrollIntoView({behavior: "smooth", block: "center"});
  });

  const abandon = document.getElementById("abandon");
  if (abandon) abandon.addEventListener("click", async function () {
    const result = await call("/abandon", {reason: document.getElementById("reason").value});
    if (result.ok) { window.location.reload(); return; }
    const error = document.getElementById("complete-error");
    error.textContent = problems(result);
    error.hidden = false;
  });
})();
