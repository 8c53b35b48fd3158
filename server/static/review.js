// datahunt review page: approve/reject (one row, or the ticked rows in one bulk call), re-run, start campaign and
// export through the JSON API; the counts per review status follow each decision without a reload. Every answer
// is said next to the control that asked (its `.feedback`, announced to screen readers), and logged in #flash.
// The API token and reviewer name are asked once and kept in this tab's sessionStorage only.
"use strict";

const store = window.sessionStorage;
// API paths are relative to the review page's root, so they also work from a dataset's own page.
const ROOT = (document.querySelector('meta[name="datahunt-root"]') || { content: "./" }).content;
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// Say `text` in the feedback line nearest `near` (the row, bar or section whose button was pressed) and log it at
// the top; an error is announced at once (role=alert), an answer politely.
function flash(text, kind, near) {
  const box = $("#flash");
  box.textContent = text;
  box.className = kind || "ok";
  const line = near && (near.matches(".feedback") ? near : $(".feedback", near));
  if (!line) return;
  line.textContent = text;
  line.className = `feedback ${kind || "ok"}`;
  line.setAttribute("role", kind === "error" ? "alert" : "status");
  if (line.getBoundingClientRect().bottom > window.innerHeight) line.scrollIntoView({ block: "nearest" });
}

function showAuth() {
  $("#reviewer").value = store.getItem("datahunt.reviewer") || "";
  $("#auth-state").textContent = store.getItem("datahunt.token") ? "token set for this tab" : "no token yet";
}

function saveAuth() {
  const token = $("#token").value.trim();
  if (token) store.setItem("datahunt.token", token);
  store.setItem("datahunt.reviewer", $("#reviewer").value.trim());
  $("#token").value = "";
  showAuth();
}

function ensureAuth() {
  if ($("#token").value.trim() || $("#reviewer").value.trim()) saveAuth();
  let token = store.getItem("datahunt.token");
  if (!token) {
    token = (window.prompt("API token (DATAHUNT_API_TOKEN) for approving and exporting:") || "").trim();
    if (!token) return null;
    store.setItem("datahunt.token", token);
  }
  let reviewer = store.getItem("datahunt.reviewer");
  if (!reviewer) {
    reviewer = (window.prompt("Your name (recorded with each decision):") || "").trim();
    if (!reviewer) return null;
    store.setItem("datahunt.reviewer", reviewer);
  }
  showAuth();
  return { token, reviewer };
}

async function call(method, path, body) {
  const auth = ensureAuth();
  if (!auth) throw new Error("an API token and your name are needed for this");
  const response = await fetch(new URL(path, ROOT), {
    method,
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + auth.token },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    if (response.status === 401) store.removeItem("datahunt.token");
    const detail = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail || data);
    throw new Error(`${response.status}: ${detail}`);
  }
  return data;
}

async function review(button, approve) {
  const row = button.closest(".entry"); // a row of the catalog table, or a dataset's own page
  const hubId = button.dataset.hubId;
  const auth = ensureAuth();
  if (!auth) return flash("an API token and your name are needed for this", "error", row);
  const overrideBox = $(".override-box", row);
  const body = { reviewer: auth.reviewer, note: $(".note", row).value || null, override: !!(overrideBox && overrideBox.checked) };
  try {
    const entry = await call("POST", `catalog/${hubId}/${approve ? "approve" : "reject"}`, body);
    showStatus(row, entry.status);
    // An approved set whose licence is non-commercial, restricted or unknown: say so now, not at publish time.
    const risk = $(".license-risk", row);
    const warning = approve && risk ? `; warning: license ${risk.textContent.trim()}, publish will ask for --accept-license-risk` : "";
    flash(`${hubId}: ${entry.status} by ${entry.reviewer}${warning}`, "ok", row);
  } catch (err) {
    return flash(`${hubId}: ${err.message}`, "error", row);
  }
  if ($("#counts")) {
    try {
      showCounts(await call("GET", "catalog/counts"));
    } catch (err) {
      flash(`counts: ${err.message}`, "error", row);
    }
  }
}

function showStatus(row, status) {
  const cell = $(".entry-status", row);
  cell.textContent = status;
  cell.className = `status status-${status} entry-status`;
}

// `counts` as the API answers it: {total, by_status: {pending_review: n, approved: n, rejected: n}}.
function showCounts(counts) {
  Object.entries(counts.by_status).forEach(([status, n]) => {
    const number = $(`#counts [data-status="${status}"] b`);
    if (number) number.textContent = String(n);
  });
}

function picked() {
  return $$("input.pick:checked").map((box) => box.dataset.hubId);
}

function showPicked() {
  const n = picked().length;
  $("#picked").textContent = `${n} selected`;
  $("#bulk-approve").disabled = $("#bulk-reject").disabled = n === 0;
  const boxes = $$("input.pick");
  $("#pick-page").checked = boxes.length > 0 && n === boxes.length;
}

// One call decides every ticked row (all or none); the rows and the counts show the answer.
async function reviewPicked(approve) {
  const hubIds = picked();
  const auth = ensureAuth();
  if (!auth) return flash("an API token and your name are needed for this", "error", $("#bulk"));
  const body = { hub_ids: hubIds, reviewer: auth.reviewer, note: $("#bulk-note").value || null,
                 override: $("#bulk-override").checked };
  try {
    const result = await call("POST", `catalog/${approve ? "approve" : "reject"}`, body);
    result.entries.forEach((entry) => {
      const row = $(`tr.entry[data-hub-id="${CSS.escape(entry.hub_id)}"]`);
      if (row) showStatus(row, entry.status);
    });
    showCounts(result.counts);
    $$("input.pick:checked").forEach((box) => { box.checked = false; });
    showPicked();
    flash(`${result.entries.length} entries ${approve ? "approved" : "rejected"} by ${auth.reviewer}`, "ok", $("#bulk"));
  } catch (err) {
    flash(`${approve ? "approve" : "reject"} ${hubIds.length} selected: ${err.message}`, "error", $("#bulk"));
  }
}

// Clamped reasons get a "show all" button only where something is hidden.
function offerMore() {
  $$("td.verifier").forEach((cell) => {
    const clamp = $(".clamp", cell);
    const button = $("button.more", cell);
    if (!clamp || !button) return;
    const clipped = clamp.scrollHeight > clamp.clientHeight + 1 || $$("li", clamp).some((li) => li.scrollWidth > li.clientWidth + 1);
    button.hidden = !clipped;
    button.addEventListener("click", () => {
      const open = cell.classList.toggle("open");
      button.textContent = open ? "show less" : "show all";
    });
  });
}

const FINAL = ["succeeded", "partial", "failed", "interrupted"];
const FINAL_RUN = ["succeeded", "empty", "failed"];
let stream = null;

function setStatus(span, status) {
  span.textContent = status;
  span.className = `status status-${status}`;
}

// One subagent's row as the API answers a run (`RunOut`): status, attempt, counts, error, and its Re-run button
// enabled once the run is over.
function showRun(row, run) {
  setStatus($(".status", row), run.status);
  $(".attempt", row).textContent = String(run.attempt);
  $(".queries", row).textContent = String((run.queries || []).length);
  $(".found", row).textContent = String(run.candidates_found);
  $(".accepted", row).textContent = String(run.candidates_accepted);
  $(".error", row).textContent = run.error || "";
  $("button.rerun", row).disabled = !FINAL_RUN.includes(run.status);
}

// Follow a campaign over Server-Sent Events: run rows and the campaign status update in place, and a finished
// re-run's row shows its new attempt and counts with its button enabled again.
function follow(campaignId) {
  if (stream) stream.close();
  stream = new EventSource(new URL(`campaigns/${campaignId}/events`, ROOT));
  const onRun = (event) => {
    const data = JSON.parse(event.data);
    const row = $(`table.runs tr[data-category="${data.category}"]`);
    if (row && data.status) setStatus($(".status", row), data.status);
    if (row && event.type === "run_finished") $(".error", row).textContent = (data.detail && data.detail.error) || "";
  };
  const onCampaign = (event) => {
    const data = JSON.parse(event.data);
    if (data.status) setStatus($("#campaign-status"), data.status);
    // Snapshots and polls carry every run: a run that finished before this stream subscribed shows up here.
    (data.runs || []).forEach((run) => {
      const row = $(`table.runs tr[data-category="${run.category}"]`);
      if (row) showRun(row, run);
    });
    if (event.type === "end") {
      stream.close();
      stream = null;
      $$("table.runs tr[data-category]").forEach((row) => {
        const button = $("button.rerun", row);
        if (button.dataset.running && FINAL_RUN.includes($(".status", row).textContent.trim())) {
          delete button.dataset.running;
          flash(`${row.dataset.category}: re-run finished (${$(".status", row).textContent.trim()}, attempt `
                + `${$(".attempt", row).textContent}, ${$(".found", row).textContent} found)`, "ok", row);
        }
      });
    }
  };
  stream.addEventListener("run_started", onRun);
  stream.addEventListener("run_finished", onRun);
  ["snapshot", "status", "campaign_finished", "end"].forEach((kind) => stream.addEventListener(kind, onCampaign));
}

async function rerun(button) {
  const { campaign, category } = button.dataset;
  const row = button.closest("tr");
  try {
    button.disabled = true;
    await call("POST", `campaigns/${campaign}/subagents/${category}/rerun`);
    button.dataset.running = "1";
    flash(`re-running ${category}`, "ok", row);
    follow(campaign);
  } catch (err) {
    button.disabled = false;
    flash(`re-run of ${category}: ${err.message}`, "error", row);
  }
}

// Ends the read session (the HttpOnly cookie) and forgets the token kept in this tab.
async function logout() {
  await fetch("session/logout", { method: "POST" });
  store.removeItem("datahunt.token");
  window.location.reload();
}

// Starts a campaign over the categories ticked, then shows it: the page of that campaign follows it live.
async function startCampaign(event) {
  event.preventDefault();
  const form = $("#new-campaign");
  const categories = $$('input[name="category"]:checked', form).map((box) => box.value);
  if (!categories.length) return flash("tick at least one category (under “over the categories ticked”)", "error", form);
  try {
    const all = categories.length === $$('input[name="category"]', form).length;
    const started = await call("POST", "campaigns", all ? {} : { categories });
    flash(`campaign ${started.id} started (${started.status}); showing it`, "ok", form);
    window.location.assign(`${new URL("./", ROOT).pathname}?campaign=${encodeURIComponent(started.id)}`);
  } catch (err) {
    flash(`campaign: ${err.message}`, "error", form);
  }
}

async function exportManifest() {
  const target = $("#target-model").value.trim();
  try {
    const result = await call("POST", "manifest/export", target ? { target_model: target } : {});
    $("#export-path").textContent = `written to ${result.path} (${result.manifest.sources.length} sources)`;
    $("#manifest-output").textContent = JSON.stringify(result.manifest, null, 2);
    flash("manifest exported", "ok", $("#export"));
  } catch (err) {
    flash(`export: ${err.message}`, "error", $("#export"));
  }
}

// `datahunt serve` without DATAHUNT_API_TOKEN prints the page's address with the token it made in the fragment
// (`#token=…`, never sent to the server): keep it for this tab and take it out of the address bar.
function takeTokenFromLink() {
  const token = new URLSearchParams(window.location.hash.slice(1)).get("token");
  if (!token) return;
  store.setItem("datahunt.token", token);
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromLink();
  showAuth();
  // Save (or Enter) submits the form; it is handled here and never sent, so the token never enters a URL.
  $("#auth").addEventListener("submit", (event) => { event.preventDefault(); saveAuth(); });
  $$("button.approve").forEach((b) => b.addEventListener("click", () => review(b, true)));
  $$("button.reject").forEach((b) => b.addEventListener("click", () => review(b, false)));
  $$("button.rerun").forEach((b) => b.addEventListener("click", () => rerun(b)));
  if ($("#bulk")) {
    $$("input.pick").forEach((box) => box.addEventListener("change", showPicked));
    $("#pick-page").addEventListener("change", () => {
      const all = $("#pick-page").checked;
      $$("input.pick").forEach((box) => { box.checked = all; });
      showPicked();
    });
    $("#bulk-approve").addEventListener("click", () => reviewPicked(true));
    $("#bulk-reject").addEventListener("click", () => reviewPicked(false));
    showPicked();
    offerMore();
  }
  // The dataset page has no campaign or export section.
  if ($("#new-campaign")) $("#new-campaign").addEventListener("submit", startCampaign);
  if ($("#logout")) $("#logout").addEventListener("click", logout);
  if ($("#export-manifest")) $("#export-manifest").addEventListener("click", exportManifest);
  const current = $("#campaign-status");
  if (current && !FINAL.includes(current.textContent.trim())) follow($("#campaign-id").textContent.trim());
});
