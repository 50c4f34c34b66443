// Reloads the page every data-refresh seconds, unless the person is typing in a form or has text in one.
(function () {
  var seconds = parseInt(document.body.getAttribute("data-refresh"), 10);
  if (!(seconds > 0)) { return; }
  setInterval(function () {
    var busy = false;
    document.querySelectorAll("textarea, input[type=text], input:not([type])").forEach(function (el) {
      if (el.value !== el.defaultValue || el === document.activeElement) { busy = true; }
    });
    if (!busy) { window.location.reload(); }
  }, seconds * 1000);
})();
