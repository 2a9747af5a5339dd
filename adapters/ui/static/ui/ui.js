// Live updates for the job pages: the job's event stream on a job page, a light poll on the list.
// Everything works without this script; it only keeps what is shown current.
(function () {
  "use strict";

  function words(status) {
    return status === "input_required" ? "waiting for input" : status.replace(/_/g, " ");
  }

  function setStatus(root, status) {
    root.dataset.status = status;
    var el = root.querySelector("[data-status-text]");
    if (el) {
      el.textContent = words(status);
      el.className = "status s-" + status;
    }
  }

  function setProgress(root, handle) {
    var bar = root.querySelector("[data-bar]");
    var count = root.querySelector("[data-count]");
    var p = handle.progress;
    if (!bar) return;
    if (p && p.total) {
      bar.max = p.total;
      bar.value = p.done;
      bar.textContent = p.done + " of " + p.total;
      if (count) count.textContent = p.done + " / " + p.total;
    } else if (handle.status === "completed") {
      bar.max = 1;
      bar.value = 1;
    }
  }

  function timelineEntry(handle) {
    var list = document.getElementById("timeline");
    if (!list) return;
    var li = document.createElement("li");
    var at = handle.lastUpdatedAt || "";
    var time = document.createElement("time");
    time.dateTime = at;
    time.textContent = at.slice(11, 23);
    var status = document.createElement("span");
    status.className = "status s-" + handle.status;
    status.textContent = handle.status.replace(/_/g, " ");
    li.appendChild(time);
    li.appendChild(document.createTextNode(" "));
    li.appendChild(status);
    if (handle.statusMessage) {
      var msg = document.createElement("span");
      msg.textContent = " " + handle.statusMessage;
      li.appendChild(msg);
    }
    list.appendChild(li);
  }

  function followJob(root) {
    var source = new EventSource(root.dataset.events);
    var last = root.querySelector("[data-updated]");
    // Leaving by a form (cancel, answer, sign out): that page is the one to show, not this one's follow-up.
    document.addEventListener("submit", function () { source.close(); });
    source.addEventListener("handle", function (event) {
      var handle = JSON.parse(event.data);
      if (last && handle.lastUpdatedAt !== last.dateTime) {
        timelineEntry(handle);
        last.dateTime = handle.lastUpdatedAt;
        last.textContent = handle.lastUpdatedAt;
      }
      setStatus(root, handle.status);
      setProgress(root, handle);
      var message = root.querySelector("[data-message]");
      if (message) message.textContent = handle.statusMessage || "";
      if (handle.status !== "working") {
        // Finished or asking: the job's page shows the result, the error or the questions (a GET, also after a cancel).
        source.close();
        window.location.assign(root.dataset.url);
      }
    });
  }

  function pollList(list) {
    function live() {
      return list.querySelector('[data-status="working"]') !== null;
    }
    if (!live()) return;
    var timer = window.setInterval(function () {
      fetch(list.dataset.poll, { headers: { "X-UI-Fragment": "rows" }, credentials: "same-origin" })
        .then(function (r) {
          if (r.redirected) window.location.assign(r.url);  // the session ended: to the sign-in page
          return r.ok && !r.redirected ? r.text() : Promise.reject(r.status);
        })
        .then(function (html) {
          list.innerHTML = html;
          if (!live()) window.clearInterval(timer);
        })
        .catch(function () { window.clearInterval(timer); });
    }, 1500);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var job = document.querySelector("[data-events]");
    if (job) followJob(job);
    var list = document.querySelector("[data-poll]");
    if (list) pollList(list);
  });
})();
