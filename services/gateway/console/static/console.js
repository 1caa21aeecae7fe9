// reviewloop console: the keymap (declared once, server-side, in body[data-keymap]), the help overlay,
// focus, the aria-live announcement, the queue's live "N new" bar and who has a draft open. No build step.
"use strict";
(function () {
  const body = document.body;
  const keymap = JSON.parse(body.dataset.keymap || "{}");
  const live = document.getElementById("live");
  const help = document.getElementById("help");
  const toggle = document.getElementById("keys-enabled");
  const keysOn = () => localStorage.getItem("rl-console-keys") !== "off";

  function announce(text) {
    if (!live || !text) return;
    live.textContent = "";
    setTimeout(() => { live.textContent = text; }, 50);
  }

  // Keys are off only where a key types: a checkbox, radio or button keeps the shortcuts.
  const NOT_TYPED = ["checkbox", "radio", "button", "submit", "reset"];
  function typing(el) {
    if (!el) return false;
    if (el.tagName === "INPUT") return !NOT_TYPED.includes(el.type);
    return el.isContentEditable || ["TEXTAREA", "SELECT"].includes(el.tagName);
  }

  function rows() { return Array.from(document.querySelectorAll("tr.row")); }

  function move(step) {
    const list = rows();
    if (list.length) {
      const at = list.findIndex((r) => r.contains(document.activeElement));
      const next = list[Math.max(0, Math.min(list.length - 1, at + step))];
      next.querySelector("a").focus();
      return;
    }
    const link = document.querySelector(step > 0 ? "a[data-next]" : "a[data-previous]");
    if (link) window.location.href = link.href;
  }

  function reveal(panelId, fieldSelector) {
    const panel = document.getElementById(panelId);
    if (!panel) return;
    panel.open = true;
    const field = panel.querySelector(fieldSelector);
    if (field) field.focus();
  }

  // Closing the overlay gives focus back where it was: left on the hidden toggle, the next keys would
  // land on nothing until the browser moved focus itself.
  let before = null;
  function showHelp(show) {
    if (!help) return;
    if (show) before = document.activeElement;
    help.hidden = !show;
    if (show) { toggle.checked = keysOn(); toggle.focus(); return; }
    if (before && before !== document.body && document.contains(before)) before.focus();
    else document.activeElement.blur();
    before = null;
  }

  const handlers = {
    next: () => move(1),
    previous: () => move(-1),
    open: () => {
      const focused = rows().find((r) => r.contains(document.activeElement));
      if (focused) { focused.querySelector("a").click(); return; }
      const button = document.querySelector("button[data-action=open]");
      if (button) button.click();
    },
    approve: () => { const b = document.querySelector("button[data-action=approve]"); if (b) b.click(); },
    edit: () => reveal("edit-panel", "input[name=subject]"),
    reject: () => reveal("reject-panel", "textarea[name=feedback]"),
    escalate: () => reveal("escalate-panel", "textarea[name=feedback]"),
    // The decision that led here (the toast's) first, else the page's one keyed Undo; a batch's results
    // with several lines open key none of them, as z cannot know which one the reviewer means.
    undo: () => {
      const b = document.querySelector("#undo-toast button[data-action=undo]")
        || document.querySelector("button[data-action=undo]");
      if (b) { b.click(); return; }
      if (document.querySelector("[data-until] button")) {
        announce("Nothing undone: several drafts here can be undone. Choose the Undo of the one you mean.");
      }
    },
    help: () => showHelp(help.hidden),
  };

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      if (help && !help.hidden) { showHelp(false); return; }
      if (typing(document.activeElement)) document.activeElement.blur();
      return;
    }
    // Ctrl/Cmd+Enter in a field submits its form (a reason, an edit, a comment) with its first button.
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && typing(event.target)) {
      const form = event.target.closest("form");
      if (form) {
        event.preventDefault();
        form.requestSubmit(form.querySelector("button[type=submit]") || undefined);
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const action = keymap[event.key];
    if (!action || !(keysOn() || action === "help")) return;
    event.preventDefault();
    handlers[action]();
  });

  document.addEventListener("click", (event) => {
    const target = event.target.closest("[data-action=help], [data-close]");
    if (target) showHelp(target.hasAttribute("data-action"));
  });
  if (toggle) toggle.addEventListener("change", () => {
    localStorage.setItem("rl-console-keys", toggle.checked ? "on" : "off");
    announce(toggle.checked ? "Single-key shortcuts on" : "Single-key shortcuts off");
  });

  // An edit's HTML part renders in its own sandboxed frame document (its CSP, not this page's): posted
  // into the frame, so the edited markup never rides in a URL.
  document.querySelectorAll("form[data-frame-post]").forEach((form) => form.submit());

  // Times: relative ("3 min ago"), the exact time on hover in the reader's own zone; kept current.
  function ago(seconds) {
    if (seconds <= -45) return "in " + ago(-seconds).replace(/ ago$/, "");  // a deadline ahead
    if (seconds < 45) return "just now";
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60]]) {
      if (seconds >= size) return Math.floor(seconds / size) + " " + unit + " ago";
    }
    return "1 min ago";
  }
  function times() {
    document.querySelectorAll("time[datetime]").forEach((el) => {
      const moment = new Date(el.getAttribute("datetime"));
      if (isNaN(moment)) return;
      el.title = moment.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "long" });
      el.textContent = ago((Date.now() - moment.getTime()) / 1000);
    });
  }
  times();
  setInterval(times, 30000);

  // An escalation's deadline is typed in the reader's local time; it travels as UTC.
  document.querySelectorAll("input[name=deadline_utc]").forEach((hidden) => {
    const typed = hidden.form.querySelector("input[name=deadline]");
    hidden.form.addEventListener("submit", () => {
      const moment = new Date(typed.value);
      hidden.value = typed.value && !isNaN(moment) ? moment.toISOString() : "";
    });
  });

  // Where the server asked for focus (the next draft after a decision, the first error), and what to say.
  const focus = document.querySelector("[data-autofocus]");
  if (focus) focus.focus();

  // Undo windows (the toast of the decision that led here, the review page's, a batch's lines): each
  // counts down, and its control is gone when it closes.
  const undoToast = document.getElementById("undo-toast");
  let said = body.dataset.announce;
  if (undoToast) {
    const left = Math.max(0, Math.ceil((new Date(undoToast.dataset.until).getTime() - Date.now()) / 1000));
    said = (said ? said + " " : "") + "Undo with the Undo button or z within " + left + " seconds.";
  }
  for (const windowed of document.querySelectorAll("[data-until]")) {
    const until = new Date(windowed.dataset.until).getTime();
    const left = windowed.querySelector(".undo-left");
    const tick = setInterval(() => {
      const s = Math.max(0, Math.ceil((until - Date.now()) / 1000));
      if (s > 0) { if (left) left.textContent = s; return; }
      clearInterval(tick);
      const hadFocus = windowed.contains(document.activeElement);
      windowed.remove();
      if (hadFocus) document.getElementById("main").focus();
      announce("The undo window closed; it is being sent.");
    }, 250);
  }
  announce(said);

  // The queue: new drafts wait behind an "N new" bar; drafts decided elsewhere grey out in place.
  const queue = document.querySelector("table[data-live]");
  if (queue && window.EventSource) {
    const bar = document.getElementById("new-bar");
    bar.addEventListener("click", () => window.location.reload());
    const fresh = new Set();
    const source = new EventSource(queue.dataset.live);
    source.addEventListener("review", (message) => {
      const review = JSON.parse(message.data);
      const row = document.getElementById("row-" + review.id);
      if (row) {
        row.querySelector(".state").textContent = review.state;
        if (!review.pending && !row.classList.contains("decided")) {
          row.classList.add("decided");
          announce("A draft was decided elsewhere: " + review.summary);
        }
      } else if (review.humans_notified) {
        notified(review);
      } else if (review.pending && review.listed && !fresh.has(review.id)) {
        fresh.add(review.id);
        bar.hidden = false;
        bar.textContent = fresh.size + " new — show";
        bar.setAttribute("aria-label", fresh.size + " new drafts: show them");
      }
    });
    // What went out without review in an auto_notify category: a new line at the top of its table
    // (below the queue, so nothing moves under the cursor), or its state brought up to date.
    const sentTable = document.querySelector("#auto-sent-section table");
    function notified(review) {
      if (!sentTable) return;
      const known = document.getElementById("auto-" + review.id);
      if (known) { known.querySelector(".state").textContent = review.state; return; }
      const row = document.createElement("tr");
      row.className = "auto-row";
      row.id = "auto-" + review.id;
      const link = document.createElement("a");
      link.href = "/console/reviews/" + encodeURIComponent(review.id);
      link.textContent = review.summary;
      const line = review.humans_notified;
      [link, line.category, line.recipients, "just now", review.state].forEach((value, at) => {
        const cell = document.createElement("td");
        if (at === 4) cell.className = "state";
        if (typeof value === "string") cell.textContent = value; else cell.appendChild(value);
        row.appendChild(cell);
      });
      sentTable.tBodies[0].prepend(row);
      if (sentTable.hidden) {
        sentTable.hidden = false;
        const empty = sentTable.previousElementSibling;
        if (empty && empty.tagName === "P") empty.hidden = true;
      }
      announce("Sent without review: " + review.summary);
    }
    source.addEventListener("presence", (message) => {
      const openBy = JSON.parse(message.data);
      rows().forEach((row) => {
        const cell = row.querySelector(".open-by");
        const text = (openBy[row.id.slice("row-".length)] || []).join(", ");
        if (cell && cell.textContent !== text) cell.textContent = text;
      });
    });
  }

  // The review page: say "I have this open" while it is, and show who else has (at once on refocus).
  const here = document.getElementById("presence");
  if (here) {
    const refresh = async () => {
      const form = new FormData();
      form.append("csrf", here.dataset.csrf);
      try {
        const response = await fetch(here.dataset.presence, { method: "POST", body: form, credentials: "same-origin" });
        if (!response.ok) return;
        const seen = await response.json();
        if (here.textContent !== seen.text) here.textContent = seen.text;
      } catch (error) { /* offline: the next beat retries */ }
    };
    setInterval(refresh, Number(here.dataset.every) * 1000);
    window.addEventListener("focus", refresh);
  }
})();
