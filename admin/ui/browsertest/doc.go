// Package browsertest drives the operator web UI (package admin/ui) in a real
// browser: Debian's chromium, through chromedp. It is a module of its own so
// that chromedp never enters the dependencies of idemkit's root module.
//
// Its test needs chromium (apt-get install chromium; IDEMKIT_CHROMIUM names
// another binary): without it the test skips, and fails under
// IDEMKIT_REQUIRE_SERVICES=1 (CI). It saves a screenshot of each page in the
// directory IDEMKIT_UI_SCREENSHOTS names (default: the test's temporary
// directory); make screenshots writes them to docs/ui.
package browsertest
