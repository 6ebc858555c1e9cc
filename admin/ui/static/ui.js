// idemkit operator UI: auto-refresh of the overview, and the bulk confirmation
// field. Served as a file: the Content-Security-Policy allows no inline script.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.getAttribute("data-refresh") || "0", 10);
  var box = document.getElementById("refresh");
  if (every > 0) {
    if (box && window.localStorage && localStorage.getItem("idemkit-refresh") === "off") {
      box.checked = false;
    }
    var timer = null;
    var arm = function () {
      if (timer) { clearTimeout(timer); timer = null; }
      if (!box || box.checked) {
        timer = setTimeout(function () { location.reload(); }, every * 1000);
      }
    };
    if (box) {
      box.addEventListener("change", function () {
        if (window.localStorage) { localStorage.setItem("idemkit-refresh", box.checked ? "on" : "off"); }
        arm();
      });
    }
    arm();
  }
  var confirmField = document.getElementById("confirm-count");
  var execute = document.getElementById("execute");
  if (confirmField && execute) {
    var want = confirmField.getAttribute("data-count");
    var check = function () { execute.disabled = confirmField.value.trim() !== want; };
    confirmField.addEventListener("input", check);
    check();
  }
})();
