// Haul dashboard: the web front end of `haul serve`.
//
// Plain ES2020, no libraries. It talks to the JSON API under /api/v1 (cookie session,
// same-origin fetch) and follows the Server-Sent Events stream /api/v1/events.
// The list is paginated by the server: only the current page's rows exist in the DOM,
// and live events update those rows in place.
"use strict";

const API = "/api/v1";
const PAGE_SIZE = 100;
const CHART_SECONDS = 300;
const REFRESH_INTERVAL = 500; // at most 2 list re-queries per second
const TABS = {
  active: ["running", "waiting"],
  waiting: ["queued"],
  paused: ["paused"],
  completed: ["completed"],
  failed: ["failed", "cancelled"],
};
const PRIORITIES = ["veryLow", "low", "normal", "high", "veryHigh"];
const STATE_LABELS = {
  queued: "Queued", running: "Downloading", waiting: "Waiting", paused: "Paused",
  completed: "Completed", failed: "Failed", cancelled: "Cancelled",
};
// Sorts whose natural first direction is ascending; the others start descending.
const ASCENDING_FIRST = new Set(["name", "state"]);

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

// ---------------------------------------------------------------------------
// State

const view = { tab: "active", q: "", sort: "created", order: "desc", offset: 0 };
const rows = new Map(); // download id -> { d: Download, tr: HTMLTableRowElement }
const selection = new Set(); // ids selected on the current page
let pageTotal = 0;
let signedIn = false;
let lastClickedId = null; // for shift-click range selection
const samples = []; // speed chart: { t: ms, v: bytes per second }

// ---------------------------------------------------------------------------
// Formatting

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

function formatBytes(n) {
  if (n == null || !Number.isFinite(n)) return "–";
  let i = 0;
  while (Math.abs(n) >= 1024 && i < UNITS.length - 1) {
    n /= 1024;
    i++;
  }
  if (i === 0) return `${Math.round(n)} B`;
  return `${n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)} ${UNITS[i]}`;
}

const formatSpeed = (bps) => `${formatBytes(bps || 0)}/s`;

function formatDuration(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** Percent done, 0-100, floored to a tenth so 100 means really finished. */
function percentOf(d) {
  if (d.state === "completed") return 100;
  if (!d.totalBytes) return 0;
  return Math.min(100, Math.floor((d.bytes / d.totalBytes) * 1000) / 10);
}

/** The priority as a word (older servers send the number 0-4). */
function priorityWord(p) {
  return typeof p === "number" ? PRIORITIES[Math.max(0, Math.min(4, p))] : p || "normal";
}

const baseName = (path) => (path || "").split("/").filter(Boolean).pop() || path || "";
const dirName = (path) => (path || "").replace(/\/[^/]*$/, "") || "/";

// ---------------------------------------------------------------------------
// API

class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

/**
 * One API call. Resolves to the parsed JSON body (or null for 204); rejects with an
 * ApiError. A 401 from anything but the session endpoint ends the session.
 */
async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(API + path, init);
  } catch {
    throw new ApiError(0, "network", "Cannot reach the Haul service.");
  }
  const text = await response.text().catch(() => "");
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // not JSON (a proxy's error page): the status says enough
  }
  if (response.ok) return data;
  const info = (data && data.error) || {};
  const message = info.message || `${response.status} ${response.statusText}`;
  // The contract adds `field` to invalidField errors; their message also starts with it.
  let field = info.field;
  if (!field && info.code === "invalidField") field = (message.match(/^([\w.[\]]+):/) || [])[1];
  if (response.status === 401 && !path.startsWith("/session")) sessionEnded();
  throw new ApiError(response.status, info.code || `http${response.status}`, message, field);
}

const idPath = (id) => `/downloads/${encodeURIComponent(id)}`;

/** Shows an action's failure, unless it was the session ending (the form says so). */
function reportError(error) {
  if (error && error.status === 401) return;
  toast(error && error.message ? error.message : String(error), true);
}

let toastTimer = null;
function toast(text, isError = false) {
  const el = $("#toast");
  el.textContent = text;
  el.classList.toggle("error", isError);
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (el.hidden = true), isError ? 6000 : 3000);
}

// ---------------------------------------------------------------------------
// Session

async function boot() {
  try {
    await api("GET", "/session");
    enterApp();
  } catch (error) {
    showSignIn(error.status === 401 ? "" : error.message);
  }
}

function showSignIn(message) {
  $("#boot").hidden = true;
  $("#app").hidden = true;
  $("#topbar-actions").hidden = true;
  $("#live").hidden = true;
  $("#signin-view").hidden = false;
  $("#signin-error").textContent = message || "";
  $("#token").focus();
}

function enterApp() {
  signedIn = true;
  $("#boot").hidden = true;
  $("#signin-view").hidden = true;
  $("#app").hidden = false;
  $("#topbar-actions").hidden = false;
  $("#live").hidden = false;
  startEvents();
  loadStats();
  loadList();
  loadSettings();
  loadClusterInfo();
  requestChart();
}

/** Any 401: stop everything live and ask for the token again. */
function sessionEnded(message = "Your session has ended. Sign in again.") {
  if (!signedIn) return;
  signedIn = false;
  stopEvents();
  for (const dialog of $$("dialog[open]")) dialog.close();
  showSignIn(message);
}

async function onSignIn(event) {
  event.preventDefault();
  const input = $("#token");
  const error = $("#signin-error");
  const token = input.value.trim();
  if (!token) {
    error.textContent = "Enter the token.";
    return;
  }
  error.textContent = "";
  $("#sign-in").disabled = true;
  try {
    await api("POST", "/session", { token });
    input.value = "";
    enterApp();
  } catch (e) {
    error.textContent = e.status === 401 ? "Wrong token." : e.message;
    input.setAttribute("aria-invalid", "true");
    input.select();
  } finally {
    $("#sign-in").disabled = false;
  }
}

async function onSignOut() {
  await api("DELETE", "/session").catch(() => {});
  sessionEnded("Signed out.");
}

/** The default directory, shown as the Add dialog's placeholder, and the speed limit. */
async function loadSettings() {
  try {
    const settings = await api("GET", "/settings");
    if (settings && settings.defaultDirectory) $("#add-directory").placeholder = settings.defaultDirectory;
    if (settings) showRateLimit(settings.maxBytesPerSecond);
  } catch {
    // optional
  }
}

/**
 * A speed as the CLI takes it: 500K, 2M, 1.5MiB, 800KB, 100000 (K, M, G and KiB, MiB, GiB
 * count in 1024s; KB, MB, GB in 1000s). 0 for "" or "none"; null when it is not a speed.
 */
function parseRate(text) {
  const t = text.trim().replace(/\/s$/, "");
  if (t === "" || t.toLowerCase() === "none") return 0;
  const m = t.match(/^(\d+(?:\.\d+)?)\s*(B|K|k|KiB|KB|kB|M|m|MiB|MB|G|g|GiB|GB)?$/);
  if (!m) return null;
  const units = { B: 1, K: 1024, k: 1024, KiB: 1024, KB: 1000, kB: 1000, M: 1 << 20, m: 1 << 20, MiB: 1 << 20,
    MB: 1e6, G: 1 << 30, g: 1 << 30, GiB: 1 << 30, GB: 1e9 };
  const bytes = Math.round(parseFloat(m[1]) * (units[m[2] || "B"]));
  return bytes >= 1 ? bytes : null;
}

function showRateLimit(bytesPerSecond) {
  const input = $("#rate-limit");
  if (document.activeElement !== input) input.value = bytesPerSecond ? formatSpeed(bytesPerSecond) : "";
}

/** Sets the limit across all downloads (PATCH /settings); it applies at once. */
async function onRateLimit(event) {
  event.preventDefault();
  const input = $("#rate-limit");
  const error = $("#rate-error");
  const bytes = parseRate(input.value);
  if (bytes === null) {
    error.textContent = "A speed such as 500K, 2M or 1.5MiB, or empty for none.";
    input.setAttribute("aria-invalid", "true");
    return;
  }
  try {
    const settings = await api("PATCH", "/settings", { maxBytesPerSecond: bytes });
    error.textContent = "";
    input.removeAttribute("aria-invalid");
    input.blur();
    showRateLimit(settings.maxBytesPerSecond);
  } catch (e) {
    error.textContent = e.message;
    input.setAttribute("aria-invalid", "true");
  }
}

// ---------------------------------------------------------------------------
// The list

let listSeq = 0;

/** Fetches the current page; a newer call makes older answers obsolete. */
async function loadList() {
  if (!signedIn) return;
  const seq = ++listSeq;
  const table = $("#downloads");
  table.setAttribute("aria-busy", "true");
  const params = new URLSearchParams({
    state: TABS[view.tab].join(","), offset: view.offset, limit: PAGE_SIZE, sort: view.sort, order: view.order,
  });
  if (view.q) params.set("q", view.q);
  try {
    const page = await api("GET", `/downloads?${params}`);
    if (seq !== listSeq) return;
    // The page emptied under us (removals): go to the last page that has rows.
    if (page.downloads.length === 0 && page.total > 0 && view.offset > 0) {
      view.offset = Math.floor((page.total - 1) / PAGE_SIZE) * PAGE_SIZE;
      saveHash();
      loadList();
      return;
    }
    renderList(page);
    table.dataset.view = view.tab;
    table.setAttribute("aria-busy", "false");
  } catch (error) {
    if (seq !== listSeq) return;
    table.setAttribute("aria-busy", "false");
    reportError(error);
  }
}

/** Puts the page's rows in order, reusing the rows that are already there. */
function renderList(page) {
  const tbody = $("#rows");
  const seen = new Set();
  page.downloads.forEach((d, index) => {
    seen.add(d.id);
    let entry = rows.get(d.id);
    if (!entry) {
      entry = { d, tr: createRow(d) };
      rows.set(d.id, entry);
    }
    entry.d = d;
    updateRow(entry);
    // Move only rows out of place, so a focused button keeps its focus.
    if (tbody.children[index] !== entry.tr) tbody.insertBefore(entry.tr, tbody.children[index] || null);
  });
  for (const [id, entry] of rows) {
    if (!seen.has(id)) {
      entry.tr.remove();
      rows.delete(id);
      selection.delete(id);
    }
  }
  pageTotal = page.total;
  updatePager();
  updateSelectionUi();
}

function createRow(d) {
  const tr = $("#row-template").content.firstElementChild.cloneNode(true);
  tr.dataset.id = d.id;
  return tr;
}

/** Fills a row from its download (everything but the live progress figures). */
function updateRow(entry) {
  const { d, tr } = entry;
  const name = d.name || baseName(d.destination) || d.url;
  tr.dataset.state = d.state;
  const nameEl = $(".name", tr);
  nameEl.textContent = name;
  nameEl.title = d.url;
  $(".path", tr).textContent = d.destination ? dirName(d.destination) : "";
  $(".path", tr).title = d.destination || "";
  const showError = d.error && ["failed", "cancelled", "waiting"].includes(d.state);
  $(".error", tr).textContent = showError ? d.error : "";
  const badge = $(".state-badge", tr);
  badge.textContent = STATE_LABELS[d.state] || d.state;
  badge.dataset.state = d.state;
  if (d.attempts > 1 && d.state !== "completed") badge.title = `Attempt ${d.attempts}`;
  const checkbox = $(".select", tr);
  checkbox.checked = selection.has(d.id);
  checkbox.setAttribute("aria-label", `Select ${name}`);
  $(".progress", tr).setAttribute("aria-label", `Progress of ${name}`);
  const priority = $(".priority", tr);
  priority.value = priorityWord(d.priority);
  priority.disabled = d.state === "completed";
  priority.setAttribute("aria-label", `Priority of ${name}`);
  setAction(tr, "pause", ["queued", "running", "waiting"].includes(d.state), name);
  setAction(tr, "resume", d.state === "paused", name);
  setAction(tr, "retry", ["failed", "cancelled"].includes(d.state), name);
  setAction(tr, "remove", true, name);
  applyProgress(entry);
}

function setAction(tr, action, visible, name) {
  const button = $(`.action-${action}`, tr);
  button.hidden = !visible;
  button.setAttribute("aria-label", `${action[0].toUpperCase()}${action.slice(1)} ${name}`);
}

/** The live figures of a row: size, bar, percent, speed, ETA, connections. */
function applyProgress({ d, tr }) {
  const percent = percentOf(d);
  const running = d.state === "running";
  const progress = $(".progress", tr);
  progress.dataset.percent = String(percent);
  progress.setAttribute("aria-valuenow", String(percent));
  progress.classList.toggle("indeterminate", running && !d.totalBytes);
  $(".bar", progress).style.width = `${percent}%`;
  // Under the bar: percent and bytes so far (just the bytes while the size is unknown).
  const finished = d.state === "completed";
  const parts = [];
  if (d.totalBytes || finished) parts.push(`${percent}%`);
  if (!finished && d.bytes > 0) parts.push(formatBytes(d.bytes));
  $(".percent", tr).textContent = parts.join(" · ");
  $(".col-size", tr).textContent = d.totalBytes != null ? formatBytes(d.totalBytes) : finished ? formatBytes(d.bytes) : "?";
  $(".col-speed", tr).textContent = running ? formatSpeed(d.bytesPerSecond) : "";
  let eta = "";
  if (running) {
    eta = d.totalBytes && d.bytesPerSecond > 0 ? formatDuration((d.totalBytes - d.bytes) / d.bytesPerSecond) : "–";
  }
  $(".col-eta", tr).textContent = eta;
  $(".col-conn", tr).textContent = running && d.connections != null ? String(d.connections) : "";
}

function updatePager() {
  const first = pageTotal === 0 ? 0 : view.offset + 1;
  const last = Math.min(view.offset + rows.size, pageTotal);
  $("#range").textContent = pageTotal === 0 ? "0 of 0" : `${first}–${last} of ${pageTotal}`;
  $("#prev").disabled = view.offset === 0;
  $("#next").disabled = view.offset + PAGE_SIZE >= pageTotal;
  $("#empty").hidden = rows.size > 0;
  $("#empty").textContent = view.q ? `No downloads match “${view.q}”.` : "No downloads here.";
}

let refreshTimer = null;
let lastRefresh = 0;

/** Re-queries the page and the stats soon, at most twice a second. */
function scheduleRefresh() {
  if (refreshTimer || !signedIn) return;
  const wait = Math.max(0, lastRefresh + REFRESH_INTERVAL - Date.now());
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    lastRefresh = Date.now();
    loadList();
    loadStats();
  }, wait);
}

// ---------------------------------------------------------------------------
// Selection

function updateSelectionUi() {
  const n = selection.size;
  $("#selection-count").textContent = `${n} selected`;
  for (const id of ["#bulk-pause", "#bulk-resume", "#bulk-retry", "#bulk-remove"]) $(id).disabled = n === 0;
  const all = $("#select-all");
  all.checked = n > 0 && n === rows.size;
  all.indeterminate = n > 0 && n < rows.size;
  for (const { d, tr } of rows.values()) tr.classList.toggle("selected", selection.has(d.id));
}

function setSelected(id, on) {
  const entry = rows.get(id);
  if (!entry) return;
  if (on) selection.add(id);
  else selection.delete(id);
  $(".select", entry.tr).checked = on;
}

/** A row checkbox; with Shift, the range from the last clicked row takes its value. */
function onRowCheckbox(checkbox, shiftKey) {
  const id = checkbox.closest("tr").dataset.id;
  const on = checkbox.checked;
  if (shiftKey && lastClickedId && rows.has(lastClickedId)) {
    const ids = Array.from($("#rows").children, (tr) => tr.dataset.id);
    const [a, b] = [ids.indexOf(lastClickedId), ids.indexOf(id)].sort((x, y) => x - y);
    for (const other of ids.slice(a, b + 1)) setSelected(other, on);
  } else {
    setSelected(id, on);
  }
  lastClickedId = id;
  updateSelectionUi();
}

function onSelectAll(event) {
  for (const id of rows.keys()) setSelected(id, event.target.checked);
  updateSelectionUi();
}

function clearSelection() {
  selection.clear();
  lastClickedId = null;
}

// ---------------------------------------------------------------------------
// Actions

/** A row's button was pressed. */
async function onRowAction(button) {
  const tr = button.closest("tr");
  const entry = rows.get(tr.dataset.id);
  if (!entry) return;
  const { id } = entry.d;
  button.disabled = true;
  try {
    if (button.classList.contains("action-pause")) {
      onDownload(await api("PATCH", idPath(id), { state: "paused" }));
    } else if (button.classList.contains("action-resume")) {
      onDownload(await api("PATCH", idPath(id), { state: "queued" }));
    } else if (button.classList.contains("action-retry")) {
      onDownload(await api("POST", `${idPath(id)}/retry`));
    } else if (button.classList.contains("action-remove")) {
      const files = await askRemove(`Remove “${entry.d.name || id}” from the list?`);
      if (files) {
        await api("DELETE", `${idPath(id)}?files=${files}`);
        onRemoved({ id });
        toast(files === "delete" ? "Removed, file deleted." : "Removed, file kept.");
      }
    }
  } catch (error) {
    reportError(error);
  } finally {
    button.disabled = false;
  }
}

async function onPriorityChange(select) {
  const entry = rows.get(select.closest("tr").dataset.id);
  if (!entry) return;
  try {
    onDownload(await api("PATCH", idPath(entry.d.id), { priority: select.value }));
  } catch (error) {
    select.value = priorityWord(entry.d.priority);
    reportError(error);
  }
}

const BULK_VERBS = { pause: "Paused", resume: "Resumed", retry: "Retried", remove: "Removed" };

/** A bulk action on the selection (or on states, for Clear finished). */
async function bulk(action, target) {
  let body = { action, ...target };
  if (action === "remove") {
    const count = target.ids ? target.ids.length : 0;
    const files = await askRemove(`Remove ${count} selected download${count === 1 ? "" : "s"} from the list?`, count);
    if (!files) return;
    body = { ...body, files };
  }
  try {
    const result = await api("POST", "/downloads/bulk", body);
    const n = result && result.affected != null ? result.affected : 0;
    toast(`${BULK_VERBS[action]} ${n} download${n === 1 ? "" : "s"}.`);
    clearSelection();
    updateSelectionUi();
    scheduleRefresh();
  } catch (error) {
    reportError(error);
  }
}

async function clearFinished() {
  try {
    const result = await api("POST", "/downloads/bulk", { action: "remove", states: ["completed"], files: "keep" });
    const n = result && result.affected != null ? result.affected : 0;
    toast(`Cleared ${n} finished download${n === 1 ? "" : "s"} (files kept).`);
    scheduleRefresh();
  } catch (error) {
    reportError(error);
  }
}

let removeResolve = null;

/** Asks keep or delete; resolves to "keep", "delete" or null (cancelled). */
function askRemove(text, count = 1) {
  const dialog = $("#remove-dialog");
  $("#remove-text").textContent = text;
  $(".remove-keep", dialog).textContent = count === 1 ? "Keep file" : "Keep files";
  $(".remove-delete", dialog).textContent = count === 1 ? "Delete file" : "Delete files";
  return new Promise((resolve) => {
    removeResolve = resolve;
    dialog.showModal();
    $(".remove-keep", dialog).focus();
  });
}

function finishRemove(answer) {
  const resolve = removeResolve;
  removeResolve = null;
  const dialog = $("#remove-dialog");
  if (dialog.open) dialog.close();
  if (resolve) resolve(answer);
}

// ---------------------------------------------------------------------------
// Add dialog

// The API's field names and the form controls that hold them.
const ADD_FIELDS = {
  url: "add-urls", directory: "add-directory", name: "add-name",
  checksum: "add-checksum", headers: "add-headers", priority: "add-priority", hls: "add-hls-variant",
};

/** Whether a URL names an HLS playlist (the service saves its stream as one file). */
function isPlaylistURL(url) {
  return /\.m3u8?(?:[?#]|$)/i.test(url);
}
let addLines = []; // index in the request's downloads -> line number in the URL box

function openAdd() {
  clearAddErrors();
  updateNameField();
  $("#add-dialog").showModal();
  $("#add-urls").focus();
}

function clearAddErrors() {
  for (const el of $$("#add-dialog .field-error")) el.textContent = "";
  for (const el of $$("#add-dialog [aria-invalid]")) el.removeAttribute("aria-invalid");
}

/** Shows `message` under the control for API field `key` (or the form when unknown). */
function showAddError(key, message, line) {
  const controlId = ADD_FIELDS[key];
  if (!controlId) {
    $("#add-error").textContent = message;
    return;
  }
  const control = document.getElementById(controlId);
  control.setAttribute("aria-invalid", "true");
  $(`#${controlId}-error`).textContent = message;
  control.focus();
  if (line != null && control.tagName === "TEXTAREA") selectLine(control, line);
}

/** Selects line `line` (0-based) of a textarea, so the bad entry stands out. */
function selectLine(textarea, line) {
  const lines = textarea.value.split("\n");
  const start = lines.slice(0, line).reduce((sum, text) => sum + text.length + 1, 0);
  textarea.setSelectionRange(start, start + (lines[line] || "").length);
}

/** The name only applies to a single URL. */
function updateNameField() {
  const count = $("#add-urls").value.split("\n").filter((l) => l.trim()).length;
  const name = $("#add-name");
  name.disabled = count > 1;
  name.title = count > 1 ? "A name only applies when adding a single URL" : "";
}

/** Reads the form into a request body; throws { key, message, line } for a bad entry. */
function readAddForm() {
  const urls = [];
  addLines = [];
  $("#add-urls").value.split("\n").forEach((text, line) => {
    if (text.trim()) {
      urls.push(text.trim());
      addLines.push(line);
    }
  });
  if (urls.length === 0) throw { key: "url", message: "Enter at least one URL." };
  const common = { priority: $("#add-priority").value };
  const directory = $("#add-directory").value.trim();
  if (directory) common.directory = directory;
  let checksum = $("#add-checksum").value.trim();
  if (/^[0-9a-f]{64}$/i.test(checksum)) checksum = `sha256=${checksum}`; // bare hex: SHA-256
  if (checksum) common.checksum = checksum;
  const headers = {};
  const headerLines = $("#add-headers").value.split("\n");
  for (let line = 0; line < headerLines.length; line++) {
    const text = headerLines[line].trim();
    if (!text) continue;
    const match = text.match(/^([^:\s][^:]*?)\s*:\s*(.*)$/);
    if (!match) throw { key: "headers", message: `Line ${line + 1}: expected “Name: value”.`, line };
    headers[match[1]] = match[2];
  }
  if (Object.keys(headers).length) common.headers = headers;
  const name = $("#add-name").value.trim();
  // A playlist's stream options, sent only for playlists and only when not the defaults.
  const hls = {};
  const variant = $("#add-hls-variant").value.trim();
  if (variant) hls.variant = variant;
  if ($("#add-hls-renditions").checked) hls.renditions = true;
  const streamOptions = Object.keys(hls).length ? { hls } : {};
  return {
    downloads: urls.map((url) => ({
      url, ...common, ...(name && urls.length === 1 ? { name } : {}), ...(isPlaylistURL(url) ? streamOptions : {}),
    })),
  };
}

async function onAddSubmit(event) {
  event.preventDefault();
  clearAddErrors();
  let body;
  try {
    body = readAddForm();
  } catch (bad) {
    showAddError(bad.key, bad.message, bad.line);
    return;
  }
  const submit = $("#add-submit");
  submit.disabled = true;
  try {
    const result = await api("POST", "/downloads", body);
    const n = result && result.ids ? result.ids.length : body.downloads.length;
    $("#add-dialog").close();
    $("#add-form").reset();
    toast(`Added ${n} download${n === 1 ? "" : "s"}.`);
    scheduleRefresh();
  } catch (error) {
    showApiAddError(error);
  } finally {
    submit.disabled = false;
  }
}

/** Maps a 400's field (`downloads[2].url`, `downloads[0].headers.X`) to the form. */
function showApiAddError(error) {
  if (error.status === 401) return;
  const match = (error.field || "").match(/^downloads\[(\d+)\]\.(\w+)/);
  if (!match) {
    $("#add-error").textContent = error.message;
    return;
  }
  const index = Number(match[1]);
  const key = match[2];
  // Drop the field path the message starts with; say which line instead.
  let message = error.message.replace(/^[\w.[\]]+:\s*/, "");
  let line = null;
  if (key === "url" && addLines[index] != null) {
    line = addLines[index];
    message = `Line ${line + 1}: ${message}`;
  }
  showAddError(key, message, line);
  if (!ADD_FIELDS[key]) $("#add-error").textContent = error.message;
}

// ---------------------------------------------------------------------------
// Stats and the speed chart

async function loadStats() {
  try {
    applyStats(await api("GET", "/stats"));
  } catch (error) {
    if (error.status !== 401) console.warn("stats:", error.message);
  }
}

function applyStats(s) {
  const c = s.counts || s; // the contract nests counts; early servers put them at the top
  const n = (state) => c[state] || 0;
  const tabCounts = {};
  for (const [tab, states] of Object.entries(TABS)) tabCounts[tab] = states.reduce((sum, st) => sum + n(st), 0);
  for (const button of $$("[data-tab]")) $(".count", button).textContent = String(tabCounts[button.dataset.tab]);
  const all = Object.keys(STATE_LABELS).reduce((sum, st) => sum + n(st), 0);
  $("#total-speed").textContent = formatSpeed(s.bytesPerSecond);
  $("#total-active").textContent = `${n("running")} (+${n("queued")} queued)`;
  $("#total-bytes").textContent =
    s.totalBytes != null ? `${formatBytes(s.completedBytes)} of ${formatBytes(s.totalBytes)}` : formatBytes(s.completedBytes);
  $("#total-jobs").textContent = String(all);
  document.title = s.bytesPerSecond > 0 ? `${formatSpeed(s.bytesPerSecond)} · Haul` : "Haul";
}

function addSample(bytesPerSecond) {
  const now = Date.now();
  samples.push({ t: now, v: bytesPerSecond || 0 });
  while (samples.length && samples[0].t < now - CHART_SECONDS * 1000 - 2000) samples.shift();
  requestChart();
}

let chartFrame = 0;
function requestChart() {
  if (!chartFrame) chartFrame = requestAnimationFrame(() => ((chartFrame = 0), drawChart()));
}

/** A round axis step (1, 2 or 5 times a power of ten) for about `parts` divisions. */
function niceStep(max, parts) {
  const raw = max / parts;
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw);
}

/** The y scale: a unit (power of 1024) and round steps in it. */
function chartScale(peak) {
  let unit = 1;
  while (peak / unit >= 1024 && unit < 1024 ** 4) unit *= 1024;
  const step = niceStep(Math.max(peak / unit, 1), 4);
  const top = Math.max(step, Math.ceil(peak / unit / step) * step);
  return { unit, step, top, max: top * unit };
}

function drawChart() {
  const canvas = $("#chart");
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (!width || !height) return;
  const dpr = window.devicePixelRatio || 1;
  // Back the canvas with device pixels so lines stay sharp on high-density screens.
  if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);

  const style = getComputedStyle(canvas);
  const color = (name) => style.getPropertyValue(name).trim();
  const pad = { left: 72, right: 10, top: 10, bottom: 20 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const now = Date.now();
  const start = now - CHART_SECONDS * 1000;
  const visible = samples.filter((s) => s.t >= start);
  const scale = chartScale(Math.max(1024, ...visible.map((s) => s.v)));
  const x = (t) => pad.left + ((t - start) / (CHART_SECONDS * 1000)) * plotW;
  const y = (v) => pad.top + plotH - (v / scale.max) * plotH;

  ctx.font = `11px ${style.fontFamily}`;
  ctx.lineWidth = 1;
  ctx.strokeStyle = color("--chart-grid");
  ctx.fillStyle = color("--muted");
  // Horizontal grid lines with speed labels.
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let value = 0; value <= scale.top + 1e-9; value += scale.step) {
    const py = Math.round(y(value * scale.unit)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(pad.left, py);
    ctx.lineTo(width - pad.right, py);
    ctx.stroke();
    ctx.fillText(formatSpeed(value * scale.unit), pad.left - 6, py);
  }
  // Time labels every minute.
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (let minutes = 5; minutes >= 0; minutes--) {
    const px = x(now - minutes * 60000);
    ctx.textAlign = minutes === 0 ? "right" : minutes === 5 ? "left" : "center";
    ctx.fillText(minutes === 0 ? "now" : `−${minutes}m`, px, height - pad.bottom + 4);
  }
  drawSpeedLine(ctx, visible, x, y, color);
}

/** The speed line and the area under it; a gap of over 3 s (disconnected) breaks it. */
function drawSpeedLine(ctx, points, x, y, color) {
  if (points.length === 0) return;
  const runs = [[]];
  for (let i = 0; i < points.length; i++) {
    if (i > 0 && points[i].t - points[i - 1].t > 3000) runs.push([]);
    runs[runs.length - 1].push(points[i]);
  }
  ctx.lineJoin = "round";
  for (const run of runs) {
    ctx.beginPath();
    run.forEach((p, i) => (i ? ctx.lineTo(x(p.t), y(p.v)) : ctx.moveTo(x(p.t), y(p.v))));
    ctx.strokeStyle = color("--accent");
    ctx.lineWidth = 1.5;
    ctx.stroke();
    ctx.lineTo(x(run[run.length - 1].t), y(0));
    ctx.lineTo(x(run[0].t), y(0));
    ctx.closePath();
    ctx.fillStyle = color("--chart-fill");
    ctx.fill();
  }
}

// ---------------------------------------------------------------------------
// Live events

let source = null;
let reconnectTimer = null;
let backoff = 1000;
let missedEvents = false; // a fresh EventSource has no Last-Event-ID: refetch on open

let everLive = false; // "Connecting…" until the stream first opens, then "Reconnecting…"

function setLive(status) {
  const live = $("#live");
  live.dataset.status = status;
  everLive = everLive || status === "live";
  $(".live-text", live).textContent = status === "live" ? "Live" : everLive ? "Reconnecting…" : "Connecting…";
}

function startEvents() {
  stopEvents();
  setLive("reconnecting");
  source = new EventSource(`${API}/events`);
  source.addEventListener("open", () => {
    setLive("live");
    backoff = 1000;
    if (missedEvents) {
      missedEvents = false;
      onResync();
    }
  });
  source.addEventListener("error", onEventsError);
  const handlers = {
    download: onDownload, progress: onProgress, removed: onRemoved, stats: onStats, resync: onResync, sync: onSync,
    cluster: onCluster,
  };
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => {
      let data;
      try {
        data = JSON.parse(event.data || "{}");
      } catch {
        return;
      }
      handler(data);
    });
  }
}

function stopEvents() {
  clearTimeout(reconnectTimer);
  reconnectTimer = null;
  if (source) source.close();
  source = null;
}

/**
 * While the stream is CONNECTING the browser retries by itself (Last-Event-ID replays what
 * was missed). Once CLOSED (e.g. a 401 or 5xx answer) we check the session and open a new
 * stream after a growing back-off.
 */
function onEventsError() {
  setLive("reconnecting");
  if (!source || source.readyState !== EventSource.CLOSED) return;
  source.close();
  source = null;
  missedEvents = true;
  clearTimeout(reconnectTimer);
  reconnectTimer = setTimeout(reconnectEvents, backoff);
  backoff = Math.min(backoff * 2, 30000);
}

async function reconnectEvents() {
  reconnectTimer = null;
  if (!signedIn) return;
  try {
    await api("GET", "/session");
    startEvents();
  } catch (error) {
    if (error.status === 401) {
      sessionEnded();
    } else {
      reconnectTimer = setTimeout(reconnectEvents, backoff);
      backoff = Math.min(backoff * 2, 30000);
    }
  }
}

/** A full download object: a state change, a new download, a priority change. */
function onDownload(d) {
  if (!d || d.id == null) return;
  const entry = rows.get(d.id);
  const belongs = TABS[view.tab].includes(d.state);
  if (entry) {
    const moved = entry.d.state !== d.state;
    entry.d = d;
    updateRow(entry);
    // It left this tab, or its state changed (order, counts): re-query.
    if (moved || !belongs) scheduleRefresh();
  } else if (belongs) {
    scheduleRefresh(); // it may belong on this page
  }
}

function onProgress(p) {
  const entry = rows.get(p.id);
  if (!entry) return;
  for (const key of ["bytes", "totalBytes", "bytesPerSecond", "connections"]) {
    if (key in p) entry.d[key] = p[key];
  }
  applyProgress(entry);
}

function onRemoved({ id }) {
  const entry = rows.get(id);
  if (entry) {
    entry.tr.remove();
    rows.delete(id);
    selection.delete(id);
    updateSelectionUi();
    updatePager();
  }
  scheduleRefresh();
}

function onStats(s) {
  applyStats(s);
  addSample(s.bytesPerSecond);
}

/** Events were missed: look everything up again. */
function onResync() {
  scheduleRefresh();
  if (cluster.available) loadClusterInfo();
}

function onSync(s) {
  if (s.state === "completed" || s.state === "failed") {
    toast(`Sync ${s.state}${s.message ? `: ${s.message}` : "."}`, s.state === "failed");
  }
}


// ---------------------------------------------------------------------------
// Cluster: the shared queue of `haul serve --queue`, every job and worker of it. The tab
// shows only when the service has a queue (GET /cluster answers 404 otherwise); `cluster`
// events say when the queue changed, and the tab then reads its page again.

const CLUSTER_PAGE = 50;
const CLUSTER_LABELS = {
  available: "Available", running: "Running", retryable: "Retrying", paused: "Paused",
  completed: "Completed", failed: "Failed", cancelled: "Cancelled",
};
const CLUSTER_UNFINISHED = ["available", "running", "retryable", "paused"];
const cluster = { available: false, shown: false, state: "", offset: 0, total: 0 };
const clusterRows = new Map(); // job id -> { job, tr }
let clusterSummary = {}; // the last numbers shown (GET /cluster, a `cluster` event, a page)
let clusterSeq = 0;
let clusterTimer = null;
let clusterLastRefresh = 0;

/** Whether the service has a queue: shows the tab (and its numbers) or hides it. */
async function loadClusterInfo() {
  try {
    applyClusterSummary(await api("GET", "/cluster"));
    setClusterAvailable(true);
  } catch (error) {
    if (error.status === 404) setClusterAvailable(false);
    else if (error.status === 503) {
      // A queue whose database is down for now: the tab says so.
      setClusterAvailable(true);
      $("#cluster-error").textContent = error.message;
    } else if (error.status !== 401) console.warn("cluster:", error.message);
  }
}

function setClusterAvailable(available) {
  cluster.available = available;
  $("#cluster-tab").hidden = !available;
  if (!available && cluster.shown) {
    changeView({});
    return;
  }
  if (available && cluster.shown) showCluster();
}

/** The queue's numbers, from GET /cluster or a `cluster` event. */
function applyClusterSummary(s) {
  clusterSummary = s;
  const counts = s.counts || {};
  const unfinished = CLUSTER_UNFINISHED.reduce((sum, state) => sum + (counts[state] || 0), 0);
  $(".count", $("#cluster-tab")).textContent = String(unfinished);
  const workers = `${s.workers || 0} worker${s.workers === 1 ? "" : "s"}` +
    (s.staleWorkers ? ` (+${s.staleWorkers} stale)` : "");
  const queue = $("#cluster-queue");
  queue.textContent = `${workers} · ${s.queue || ""}`;
  queue.title = s.queue || "";
  for (const option of $$("#cluster-state option")) {
    const label = option.value ? CLUSTER_LABELS[option.value] : "All jobs";
    const n = option.value ? counts[option.value] || 0 : s.total || 0;
    option.textContent = `${label} (${n})`;
  }
  $("#cluster-error").textContent = s.error || "";
}

function onCluster(s) {
  if (!cluster.available) setClusterAvailable(true);
  applyClusterSummary(s);
  if (cluster.shown) scheduleClusterRefresh();
}

function showCluster() {
  cluster.shown = true;
  syncControls();
  saveHash();
  loadCluster();
}

/** Re-reads the page and the workers soon, at most twice a second. */
function scheduleClusterRefresh() {
  if (clusterTimer || !signedIn) return;
  const wait = Math.max(0, clusterLastRefresh + REFRESH_INTERVAL - Date.now());
  clusterTimer = setTimeout(() => {
    clusterTimer = null;
    clusterLastRefresh = Date.now();
    loadCluster();
  }, wait);
}

async function loadCluster() {
  if (!signedIn || !cluster.shown) return;
  const seq = ++clusterSeq;
  const table = $("#cluster-jobs");
  table.setAttribute("aria-busy", "true");
  const params = new URLSearchParams({ offset: cluster.offset, limit: CLUSTER_PAGE, sort: "created", order: "desc" });
  if (cluster.state) params.set("state", cluster.state);
  try {
    const [page, workers] = await Promise.all([api("GET", `/cluster/jobs?${params}`), api("GET", "/cluster/workers")]);
    if (seq !== clusterSeq) return;
    if (page.jobs.length === 0 && page.total > 0 && cluster.offset > 0) {
      cluster.offset = Math.floor((page.total - 1) / CLUSTER_PAGE) * CLUSTER_PAGE;
      loadCluster();
      return;
    }
    renderClusterJobs(page);
    renderWorkers(workers.workers || []);
    $("#cluster-error").textContent = "";
    table.setAttribute("aria-busy", "false");
  } catch (error) {
    if (seq !== clusterSeq) return;
    table.setAttribute("aria-busy", "false");
    if (error.status === 404) setClusterAvailable(false);
    else if (error.status !== 401) $("#cluster-error").textContent = error.message;
  }
}

function renderClusterJobs(page) {
  const tbody = $("#cluster-rows");
  const seen = new Set();
  page.jobs.forEach((job, index) => {
    seen.add(job.id);
    let entry = clusterRows.get(job.id);
    if (!entry) {
      entry = { job, tr: createClusterRow(job) };
      clusterRows.set(job.id, entry);
    }
    entry.job = job;
    updateClusterRow(entry);
    if (tbody.children[index] !== entry.tr) tbody.insertBefore(entry.tr, tbody.children[index] || null);
  });
  for (const [id, entry] of clusterRows) {
    if (!seen.has(id)) {
      entry.tr.remove();
      clusterRows.delete(id);
    }
  }
  cluster.total = page.total;
  const first = page.total === 0 ? 0 : cluster.offset + 1;
  const last = Math.min(cluster.offset + clusterRows.size, page.total);
  $("#cluster-range").textContent = page.total === 0 ? "0 of 0" : `${first}–${last} of ${page.total}`;
  $("#cluster-prev").disabled = cluster.offset === 0;
  $("#cluster-next").disabled = cluster.offset + CLUSTER_PAGE >= page.total;
  $("#cluster-empty").hidden = clusterRows.size > 0;
  // The page's counts are as fresh as its rows.
  if (page.counts) {
    const total = Object.values(page.counts).reduce((sum, n) => sum + n, 0);
    applyClusterSummary({ ...clusterSummary, counts: page.counts, total });
  }
}

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text != null) el.textContent = text;
  return el;
}

function createClusterRow(job) {
  const tr = element("tr");
  tr.dataset.key = job.id;
  const state = element("td", "col-state");
  state.append(element("span", "state-badge"));
  const name = element("td", "col-name");
  name.append(element("span", "name"), element("span", "url muted"), element("span", "error"));
  const progress = element("td", "col-progress");
  const bar = element("div", "progress");
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.append(element("div", "bar"));
  progress.append(bar, element("span", "percent"));
  const actions = element("td", "col-actions");
  for (const action of ["pause", "resume", "retry", "cancel"]) {
    const button = element("button", `icon cluster-${action}`, action[0].toUpperCase() + action.slice(1));
    button.type = "button";
    button.dataset.action = action;
    actions.append(button);
  }
  tr.append(state, name, progress, element("td", "col-attempt"), element("td", "col-worker"), actions);
  return tr;
}

function updateClusterRow({ job, tr }) {
  tr.dataset.state = job.state;
  const badge = $(".state-badge", tr);
  const pending = job.command === "pause" ? " (pausing)" : job.command === "cancel" ? " (cancelling)" : "";
  badge.textContent = (CLUSTER_LABELS[job.state] || job.state) + pending;
  badge.dataset.state = job.state;
  badge.title = job.state === "retryable" && job.scheduledAt ? `Next attempt at ${new Date(job.scheduledAt).toLocaleString()}` : "";
  $(".name", tr).textContent = job.name || job.url;
  $(".name", tr).title = job.id;
  $(".url", tr).textContent = job.url;
  $(".url", tr).title = job.url;
  $(".error", tr).textContent = job.error && job.state !== "completed" ? job.error : "";
  const done = job.state === "completed";
  const percent = done ? 100 : job.totalBytes ? Math.min(100, Math.floor((job.bytes / job.totalBytes) * 1000) / 10) : 0;
  const bar = $(".progress", tr);
  bar.dataset.percent = String(percent);
  bar.setAttribute("aria-valuenow", String(percent));
  bar.setAttribute("aria-label", `Progress of ${job.name || job.url}`);
  $(".bar", bar).style.width = `${percent}%`;
  const parts = [];
  if (job.totalBytes || done) parts.push(`${percent}%`);
  if (job.totalBytes) parts.push(`${formatBytes(job.bytes)} of ${formatBytes(job.totalBytes)}`);
  else if (job.bytes > 0) parts.push(formatBytes(job.bytes));
  $(".percent", tr).textContent = parts.join(" · ");
  $(".col-attempt", tr).textContent = `${job.attempt}/${job.maxAttempts}`;
  const worker = $(".col-worker", tr);
  worker.textContent = job.worker ? `${job.workerHost || "?"} #${job.worker}` : "–";
  worker.title = job.worker ? (job.state === "running" ? "Runs it now" : "Ran it last") : "";
  worker.classList.toggle("muted", job.state !== "running");
  const show = {
    pause: ["available", "retryable"].includes(job.state) || (job.state === "running" && !job.command),
    resume: job.state === "paused" || (job.state === "running" && job.command === "pause"),
    retry: ["failed", "cancelled"].includes(job.state),
    cancel: CLUSTER_UNFINISHED.includes(job.state) && job.command !== "cancel",
  };
  for (const [action, visible] of Object.entries(show)) {
    const button = $(`.cluster-${action}`, tr);
    button.hidden = !visible;
    button.setAttribute("aria-label", `${button.textContent} ${job.name || job.url}`);
  }
}

function formatAge(seconds) {
  return seconds < 1 ? "just now" : `${formatDuration(seconds)} ago`;
}

function renderWorkers(workers) {
  const tbody = $("#cluster-worker-rows");
  const alive = workers.filter((w) => w.status === "alive").length;
  applyClusterSummary({ ...clusterSummary, workers: alive, staleWorkers: workers.length - alive });
  tbody.replaceChildren(...workers.map((w) => {
    const tr = element("tr");
    tr.dataset.worker = String(w.id);
    const status = element("td", "col-state");
    const badge = element("span", "state-badge", w.status === "alive" ? "Alive" : "Stale");
    badge.dataset.state = w.status;
    status.append(badge);
    const heartbeat = element("td", "col-time", formatAge(w.heartbeatAge));
    heartbeat.title = new Date(w.heartbeatAt).toLocaleString();
    tr.append(
      element("td", "col-worker-id", `#${w.id}`), element("td", null, w.host), element("td", "col-pid", String(w.pid)),
      element("td", "col-time", new Date(w.startedAt).toLocaleString()), heartbeat, status,
      element("td", "col-jobs", String(w.runningJobs)), element("td", "col-size", formatBytes(w.bytes)));
    return tr;
  }));
  $("#cluster-no-workers").hidden = workers.length > 0;
}

const clusterPath = (id) => `/cluster/jobs/${encodeURIComponent(id)}`;

async function onClusterAction(button) {
  const entry = clusterRows.get(button.closest("tr").dataset.key);
  if (!entry) return;
  const { id } = entry.job;
  button.disabled = true;
  try {
    let job;
    switch (button.dataset.action) {
      case "pause": job = await api("PATCH", clusterPath(id), { state: "paused" }); break;
      case "resume": job = await api("PATCH", clusterPath(id), { state: "queued" }); break;
      case "retry": job = await api("POST", `${clusterPath(id)}/retry`); break;
      case "cancel": job = await api("DELETE", clusterPath(id)); break;
    }
    if (job) {
      entry.job = job;
      updateClusterRow(entry);
    }
    scheduleClusterRefresh();
  } catch (error) {
    reportError(error);
  } finally {
    button.disabled = false;
  }
}

async function onClusterAdd(event) {
  event.preventDefault();
  const input = $("#cluster-add-urls");
  const error = $("#cluster-add-error");
  const urls = input.value.split(/\s+/).filter(Boolean);
  if (urls.length === 0) {
    error.textContent = "Enter at least one URL.";
    input.setAttribute("aria-invalid", "true");
    return;
  }
  const submit = $("#cluster-add-submit");
  submit.disabled = true;
  try {
    const result = await api("POST", "/cluster/jobs", { jobs: urls.map((url) => ({ url })) });
    const added = result && result.added != null ? result.added : urls.length;
    const already = urls.length - added;
    toast(`Queued ${added} job${added === 1 ? "" : "s"} for the workers${already ? ` (${already} already queued)` : ""}.`);
    input.value = "";
    error.textContent = "";
    input.removeAttribute("aria-invalid");
    scheduleClusterRefresh();
  } catch (e) {
    if (e.status === 401) return;
    // "jobs[1].url: …" says which URL: the second.
    const match = (e.field || "").match(/^jobs\[(\d+)\]\.(\w+)/);
    error.textContent = match ? `${urls[Number(match[1])]}: ${e.message.replace(/^[\w.[\]]+:\s*/, "")}` : e.message;
    input.setAttribute("aria-invalid", "true");
  } finally {
    submit.disabled = false;
  }
}

function bindClusterEvents() {
  $("#cluster-tab").addEventListener("click", showCluster);
  $("#cluster-tab").addEventListener("keydown", onTabKey);
  $("#cluster-state").addEventListener("change", (event) => {
    cluster.state = event.target.value;
    cluster.offset = 0;
    loadCluster();
  });
  $("#cluster-prev").addEventListener("click", () => {
    cluster.offset = Math.max(0, cluster.offset - CLUSTER_PAGE);
    loadCluster();
  });
  $("#cluster-next").addEventListener("click", () => {
    cluster.offset += CLUSTER_PAGE;
    loadCluster();
  });
  $("#cluster-rows").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (button) onClusterAction(button);
  });
  $("#cluster-add-form").addEventListener("submit", onClusterAdd);
  $("#cluster-add-urls").addEventListener("input", (e) => e.target.removeAttribute("aria-invalid"));
}

// ---------------------------------------------------------------------------
// View: tabs, search, sort, pages (kept in the URL's hash so a reload keeps them)

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  if (TABS[params.get("tab")]) view.tab = params.get("tab");
  cluster.shown = params.get("tab") === "cluster";
  view.q = params.get("q") || "";
  if ($(`#sort option[value="${params.get("sort")}"]`)) view.sort = params.get("sort");
  if (["asc", "desc"].includes(params.get("order"))) view.order = params.get("order");
  view.offset = Math.max(0, Number(params.get("offset")) || 0);
}

function saveHash() {
  const params = new URLSearchParams({ tab: cluster.shown ? "cluster" : view.tab, sort: view.sort, order: view.order });
  if (view.q) params.set("q", view.q);
  if (view.offset) params.set("offset", view.offset);
  history.replaceState(null, "", `#${params}`);
}

/** Reflects `view` in the controls. */
function syncControls() {
  for (const button of $$("[data-tab]")) {
    const on = !cluster.shown && button.dataset.tab === view.tab;
    button.setAttribute("aria-selected", String(on));
    button.tabIndex = on ? 0 : -1;
  }
  const clusterTab = $("#cluster-tab");
  clusterTab.setAttribute("aria-selected", String(cluster.shown));
  clusterTab.tabIndex = cluster.shown ? 0 : -1;
  $("#downloads-view").hidden = cluster.shown;
  $("#cluster-view").hidden = !cluster.shown;
  $("#search").value = view.q;
  $("#sort").value = view.sort;
  const order = $("#order");
  order.textContent = view.order === "asc" ? "↑" : "↓";
  order.setAttribute("aria-label", view.order === "asc" ? "Sorted ascending; sort descending" : "Sorted descending; sort ascending");
  for (const th of $$("th[data-sort]")) {
    const sorted = th.dataset.sort === view.sort;
    th.setAttribute("aria-sort", sorted ? (view.order === "asc" ? "ascending" : "descending") : "none");
  }
}

/** Changes the view and loads its first page (or the given offset). */
function changeView(changes) {
  if (cluster.shown) {
    // Back from the Cluster tab to the downloads.
    cluster.shown = false;
    clusterSeq++;
  }
  const tabChanged = changes.tab && changes.tab !== view.tab;
  Object.assign(view, { offset: 0 }, changes);
  if (tabChanged) {
    clearSelection();
    // Another tab's rows: clear at once, so stale rows never show under the new tab.
    for (const entry of rows.values()) entry.tr.remove();
    rows.clear();
  }
  syncControls();
  saveHash();
  loadList();
  if (tabChanged) loadStats(); // fresh counts next to the fresh list
}

function onTabKey(event) {
  const tabs = [...$$("[data-tab]"), ...(cluster.available ? [$("#cluster-tab")] : [])];
  const index = tabs.indexOf(event.target);
  const moves = { ArrowRight: 1, ArrowLeft: -1, Home: -index, End: tabs.length - 1 - index };
  if (!(event.key in moves)) return;
  event.preventDefault();
  const next = tabs[(index + moves[event.key] + tabs.length) % tabs.length];
  next.focus();
  if (next.id === "cluster-tab") showCluster();
  else changeView({ tab: next.dataset.tab });
}

function onSortHeader(th) {
  const key = th.dataset.sort;
  if (key === view.sort) changeView({ order: view.order === "asc" ? "desc" : "asc" });
  else changeView({ sort: key, order: ASCENDING_FIRST.has(key) ? "asc" : "desc" });
}

let searchTimer = null;
function onSearchInput(event) {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => changeView({ q: event.target.value.trim() }), 250);
}

function onGlobalKey(event) {
  const typing = event.target.closest("input, textarea, select, [contenteditable]");
  if (event.key === "/" && !typing && !$("dialog[open]") && signedIn) {
    event.preventDefault();
    $("#search").focus();
  }
}

// ---------------------------------------------------------------------------
// Wiring

function bindEvents() {
  $("#signin-form").addEventListener("submit", onSignIn);
  $("#token").addEventListener("input", (e) => e.target.removeAttribute("aria-invalid"));
  $("#sign-out").addEventListener("click", onSignOut);
  $("#add-button").addEventListener("click", openAdd);
  $("#rate-form").addEventListener("submit", onRateLimit);
  $("#add-form").addEventListener("submit", onAddSubmit);
  $("#add-cancel").addEventListener("click", () => $("#add-dialog").close());
  $("#add-urls").addEventListener("input", updateNameField);
  for (const el of $$("#add-form input, #add-form textarea, #add-form select")) {
    el.addEventListener("input", () => el.removeAttribute("aria-invalid"));
  }

  const removeDialog = $("#remove-dialog");
  $(".remove-keep", removeDialog).addEventListener("click", () => finishRemove("keep"));
  $(".remove-delete", removeDialog).addEventListener("click", () => finishRemove("delete"));
  $(".remove-cancel", removeDialog).addEventListener("click", () => finishRemove(null));
  removeDialog.addEventListener("close", () => finishRemove(null)); // Escape

  for (const button of $$("[data-tab]")) {
    button.addEventListener("click", () => changeView({ tab: button.dataset.tab }));
    button.addEventListener("keydown", onTabKey);
  }
  $("#search").addEventListener("input", onSearchInput);
  $("#sort").addEventListener("change", (e) =>
    changeView({ sort: e.target.value, order: ASCENDING_FIRST.has(e.target.value) ? "asc" : "desc" }));
  $("#order").addEventListener("click", () => changeView({ order: view.order === "asc" ? "desc" : "asc" }));
  for (const th of $$("th[data-sort]")) $("button", th).addEventListener("click", () => onSortHeader(th));
  $("#prev").addEventListener("click", () => changeView({ offset: Math.max(0, view.offset - PAGE_SIZE) }));
  $("#next").addEventListener("click", () => changeView({ offset: view.offset + PAGE_SIZE }));

  const tbody = $("#rows");
  tbody.addEventListener("click", (event) => {
    const button = event.target.closest("button[class*='action-']");
    if (button) onRowAction(button);
    if (event.target.matches(".select")) onRowCheckbox(event.target, event.shiftKey);
  });
  tbody.addEventListener("change", (event) => {
    if (event.target.matches(".priority")) onPriorityChange(event.target);
  });
  $("#select-all").addEventListener("change", onSelectAll);
  const selected = () => ({ ids: [...selection] });
  $("#bulk-pause").addEventListener("click", () => bulk("pause", selected()));
  $("#bulk-resume").addEventListener("click", () => bulk("resume", selected()));
  $("#bulk-retry").addEventListener("click", () => bulk("retry", selected()));
  $("#bulk-remove").addEventListener("click", () => bulk("remove", selected()));
  $("#clear-finished").addEventListener("click", clearFinished);
  bindClusterEvents();

  document.addEventListener("keydown", onGlobalKey);
  new ResizeObserver(requestChart).observe($("#chart"));
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", requestChart);
  // Let the time axis slide even when no stats arrive (disconnected).
  setInterval(() => signedIn && !document.hidden && requestChart(), 5000);
}

readHash();
syncControls();
bindEvents();
boot();
