#!/usr/bin/env python3
"""Drives the Haul dashboard in headless Chromium, end to end against a running `haul serve`.

    HAUL_TOKEN=... python3 Tests/Browser/dashboard_test.py --base http://127.0.0.1:PORT \
        --url DOWNLOAD_URL --file EXPECTED_ABSOLUTE_PATH --sha256 HEX --name FILENAME \
        [--cluster-job KEY [--cluster-worker HOST]] [--screenshot PATH]

The token comes from the environment only (argv is visible in `ps`). The download URL is
expected to stall its first response after part of the body, so the download can be seen
moving and paused before it completes. With --cluster-job (a service started with --queue, whose
shared queue holds a waiting job with that key), the Cluster tab must show, list the job and pause
it, and list the worker HOST when --cluster-worker is given.

Exit status: 0 and `PASS` on success; 1 and `FAIL: step N (...)` on failure (with the
browser console and a screenshot at /tmp/haul-dashboard-failure.png); 77 and `SKIP: reason`
when Selenium, Chromium or chromedriver is not available.
"""
import argparse
import hashlib
import json
import os
import re
import sys

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FAILURE_SCREENSHOT = "/tmp/haul-dashboard-failure.png"
TIMEOUT = 60
SKIP = 77
TABS_SEARCHED_FOR_NEW = ("active", "waiting")

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait
except Exception as error:  # ImportError, or a broken installation
    # Debian's python3-selenium lives in the system interpreter; a `python3` found first on
    # PATH (pyenv, a venv) may lack it. Try the system one once before skipping.
    SYSTEM_PYTHON = "/usr/bin/python3"
    if (os.environ.get("HAUL_DASHBOARD_TEST_REEXEC") != "1" and os.access(SYSTEM_PYTHON, os.X_OK)
            and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)):
        os.environ["HAUL_DASHBOARD_TEST_REEXEC"] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    print(f"SKIP: selenium is not available ({error})", flush=True)
    sys.exit(SKIP)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the service's base URL, e.g. http://127.0.0.1:6800")
    parser.add_argument("--url", required=True, help="the URL to download (also the download's id)")
    parser.add_argument("--file", required=True, help="the absolute path the file must end up at")
    parser.add_argument("--sha256", required=True, help="the file's expected SHA-256, hex")
    parser.add_argument("--name", required=True, help="the file name to type in the Add dialog")
    parser.add_argument("--screenshot", help="save a screenshot here once the download completed")
    parser.add_argument("--cluster-job", help="the key of a waiting job of the service's shared queue")
    parser.add_argument("--cluster-worker", help="the host of a worker registered in the shared queue")
    parser.add_argument("--stream-url", help="an HLS playlist to add with a stream variant (its id is its URL)")
    parser.add_argument("--stream-file", help="the absolute path the stream's file must end up at")
    parser.add_argument("--stream-sha256", help="the stream file's expected SHA-256, hex")
    return parser.parse_args()


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


def start_browser():
    """Headless Chromium through the system chromedriver, or SKIP."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            skip(f"{path} is not installed")
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900",
                     "--disable-gpu", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        skip(f"cannot start Chromium with chromedriver: {first_line}")
    driver.set_window_size(1280, 900)
    driver.set_script_timeout(15)
    return driver


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class StepFailed(Exception):
    pass


class DashboardTest:
    def __init__(self, driver, args, token):
        self.driver = driver
        self.args = args
        self.token = token
        self.id = args.url  # the download's id is its URL
        self.step_name = "setup"

    # -- helpers ---------------------------------------------------------------

    def step(self, number, title):
        self.step_name = f"step {number} ({title})"
        print(f"step {number}: {title}", flush=True)

    def wait(self, condition, message, timeout=TIMEOUT):
        wait = WebDriverWait(self.driver, timeout, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException,))
        return wait.until(condition, message)

    def css(self, selector):
        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def visible(self, selector):
        return self.wait(EC.visibility_of_element_located((By.CSS_SELECTOR, selector)), f"{selector} never became visible")

    def click(self, selector):
        self.wait(EC.element_to_be_clickable((By.CSS_SELECTOR, selector)), f"{selector} never became clickable").click()

    def open_tab(self, tab):
        """Clicks a tab and waits until the table shows that tab's first answer."""
        self.click(f'button[data-tab="{tab}"]')
        self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, f'#downloads[data-view="{tab}"][aria-busy="false"]')),
                  f"the {tab} tab never finished loading")

    def row(self):
        """The download's row on the page shown, or None."""
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#rows tr[data-id]'))"
            ".find((row) => row.dataset.id === arguments[0]) || null;", self.id)

    def row_where(self, predicate):
        """A wait condition: the row, once it exists and `predicate(row)` holds."""
        def check(_driver):
            row = self.row()
            return row if row is not None and predicate(row) else False
        return check

    @staticmethod
    def percent(row):
        return float(row.find_element(By.CSS_SELECTOR, ".progress").get_attribute("data-percent") or "nan")

    def count(self, tab):
        text = self.css(f'button[data-tab="{tab}"] .count').text.strip()
        return int(text) if text.isdigit() else -1

    def listed_total(self):
        """N of the pager's "X–Y of N"."""
        match = re.search(r"of\s+(\d+)", self.css("#range").text)
        return int(match.group(1)) if match else -1

    def row_button(self, action):
        """The row's visible button for `action` (pause, resume, retry, remove)."""
        def check(_driver):
            row = self.row()
            if row is None:
                return False
            button = row.find_element(By.CSS_SELECTOR, f".action-{action}")
            return button if button.is_displayed() and button.is_enabled() else False
        return self.wait(check, f"the row's {action} button never showed")

    def server_view(self):
        """What the API says about the download, for failure messages."""
        try:
            return self.driver.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "fetch('/api/v1/downloads/' + encodeURIComponent(arguments[0]), {credentials: 'same-origin'})"
                ".then((r) => r.text().then((t) => done(r.status + ' ' + t)))"
                ".catch((e) => done('fetch failed: ' + e));", self.id)
        except Exception as error:
            return f"unavailable ({type(error).__name__})"

    # -- the steps -------------------------------------------------------------

    def run(self):
        self.sign_in()
        self.add()
        self.see_progress()
        self.pause()
        self.resume_to_completion()
        self.check_file()
        self.remove_keeping_file()
        self.speed_limit()
        if self.args.cluster_job:
            self.cluster()
        if self.args.stream_url:
            self.stream()

    def stream(self):
        self.step(10, "add an HLS playlist as a stream, with a variant")
        self.open_tab("completed")
        self.click("#add-button")
        self.visible("#add-urls").send_keys(self.args.stream_url)
        self.css("#add-hls-variant").send_keys("worst")
        self.click("#add-submit")
        self.wait(lambda d: not self.css("#add-dialog").is_displayed(), "the Add dialog did not close")
        self.id = self.args.stream_url
        self.wait(self.row_where(lambda r: r.get_attribute("data-state") == "completed"),
                  "the stream never showed as completed in the Completed tab", timeout=2 * TIMEOUT)
        if not os.path.isfile(self.args.stream_file):
            raise StepFailed(f"{self.args.stream_file} does not exist")
        actual = sha256_of(self.args.stream_file)
        if actual != self.args.stream_sha256.lower():
            raise StepFailed(f"{self.args.stream_file} has SHA-256 {actual}, expected {self.args.stream_sha256.lower()}")

    def sign_in(self):
        self.step(1, "sign in")
        self.driver.get(self.args.base)
        if self.driver.execute_script("return location.protocol") == "chrome-error:":
            raise StepFailed(f"the browser could not load {self.args.base}")
        token = self.visible("#token")
        token.send_keys("definitely-not-the-token")
        self.click("#sign-in")
        self.wait(lambda d: self.css("#signin-error").is_displayed() and self.css("#signin-error").text.strip(),
                  "a wrong token showed no error")
        if self.css("#app").is_displayed():
            raise StepFailed("a wrong token opened the app")
        token = self.css("#token")
        token.clear()
        token.send_keys(self.token)
        self.click("#sign-in")  # submitting clears the previous error at once

        def signed_in(_driver):
            error = self.css("#signin-error")
            if error.is_displayed() and error.text.strip():
                raise StepFailed(f"signing in with HAUL_TOKEN failed: {error.text.strip()}")
            return self.css("#app").is_displayed()
        self.wait(signed_in, "the app never showed after signing in with HAUL_TOKEN")
        self.wait(lambda d: not self.css("#signin-view").is_displayed(), "the sign-in form stayed after signing in")
        # The token must not have been put anywhere scripts or URLs can see.
        leaked = self.driver.execute_script(
            "const t = arguments[0];"
            "const stores = [location.href, document.cookie, JSON.stringify(localStorage), JSON.stringify(sessionStorage)];"
            "return stores.some((s) => s.includes(t));", self.token)
        if leaked:
            raise StepFailed("the token is visible in the URL, document.cookie or web storage")

    def add(self):
        self.step(2, "add the download")
        self.click("#add-button")
        urls = self.visible("#add-urls")
        urls.send_keys(self.args.url)
        self.css("#add-name").send_keys(self.args.name)
        self.click("#add-submit")

        def dialog_closed(_driver):
            errors = [e.text.strip() for e in self.driver.find_elements(By.CSS_SELECTOR, "#add-dialog .field-error")
                      if e.is_displayed() and e.text.strip()]
            if errors:
                raise StepFailed(f"the Add dialog showed: {'; '.join(errors)}")
            return not self.css("#add-dialog").is_displayed()
        self.wait(dialog_closed, "the Add dialog did not close")

        # It may be queued (Waiting) or already running (Active): look in both.
        tabs = list(TABS_SEARCHED_FOR_NEW)
        turn = {"next": 0}

        def found_in_a_tab(_driver):
            tab = tabs[turn["next"] % len(tabs)]
            turn["next"] += 1
            self.open_tab(tab)
            return tab if self.row() is not None else False
        tab = self.wait(found_in_a_tab, f"no row with data-id {self.id!r} in the Active or Waiting tab")
        print(f"  found in the {tab} tab", flush=True)

    def see_progress(self):
        self.step(3, "see the progress bar move")
        self.open_tab("active")
        row = self.wait(self.row_where(lambda r: self.percent(r) > 0),
                        "the row never showed progress above 0% in the Active tab")
        print(f"  {self.percent(row)}% ({row.get_attribute('data-state')})", flush=True)

    def pause(self):
        self.step(4, "pause")
        self.row_button("pause").click()
        self.open_tab("paused")
        self.wait(self.row_where(lambda r: r.get_attribute("data-state") == "paused"),
                  "the row never showed as paused in the Paused tab")

    def resume_to_completion(self):
        self.step(5, "resume until completed")
        self.row_button("resume").click()
        self.open_tab("completed")
        self.wait(self.row_where(lambda r: r.get_attribute("data-state") == "completed" and self.percent(r) == 100),
                  "the row never showed as completed at 100% in the Completed tab", timeout=2 * TIMEOUT)
        if self.args.screenshot:
            # Let a passing notice ("Added 1 download.") fade first, for a clean picture.
            self.wait(lambda d: not self.css("#toast").is_displayed(), "a notice never went away", timeout=15)
            self.driver.save_screenshot(self.args.screenshot)
            print(f"  screenshot saved to {self.args.screenshot}", flush=True)

    def check_file(self):
        self.step(6, "check the file")
        if not os.path.isfile(self.args.file):
            raise StepFailed(f"{self.args.file} does not exist")
        actual = sha256_of(self.args.file)
        if actual != self.args.sha256.lower():
            raise StepFailed(f"{self.args.file} has SHA-256 {actual}, expected {self.args.sha256.lower()}")

    def remove_keeping_file(self):
        self.step(7, "remove, keeping the file")
        # The tab's count comes from the stats, the pager's total from the list: once they
        # agree, the count includes this download, and removing it must lower it.
        def settled_count(_driver):
            count = self.count("completed")
            return count if count >= 1 and count == self.listed_total() else False
        before = self.wait(settled_count, "the Completed count never matched the Completed list's total")
        self.row_button("remove").click()
        self.click(".remove-keep")
        self.wait(lambda d: self.row() is None, "the row was still listed after removing it")
        self.wait(lambda d: 0 <= self.count("completed") < before,
                  f"the Completed count stayed at {before} after removing the download")
        if not os.path.isfile(self.args.file):
            raise StepFailed(f"{self.args.file} was deleted although the file was to be kept")


    def settings(self):
        """GET /api/v1/settings, through the page's session."""
        text = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('/api/v1/settings', {credentials: 'same-origin'})"
            ".then((r) => r.text().then(done)).catch((e) => done('null'));")
        return json.loads(text) or {}

    def speed_limit(self):
        self.step(8, "set and lift the speed limit")
        field = self.visible("#rate-limit")
        field.clear()
        field.send_keys("fast")
        self.click("#rate-apply")
        self.wait(lambda d: self.css("#rate-error").is_displayed() and self.css("#rate-error").text.strip(),
                  "a speed that is not one showed no error")
        if self.settings().get("maxBytesPerSecond") != 0:
            raise StepFailed("a speed that is not one changed the limit")
        field = self.css("#rate-limit")
        field.clear()
        field.send_keys("2M")
        self.click("#rate-apply")
        self.wait(lambda d: self.settings().get("maxBytesPerSecond") == 2 * 1024 * 1024,
                  "setting 2M in the dashboard did not set the service's limit to 2 MiB/s")
        self.wait(lambda d: not self.css("#rate-error").is_displayed(), "the error stayed after a good speed")
        field = self.css("#rate-limit")
        field.clear()
        self.click("#rate-apply")
        self.wait(lambda d: self.settings().get("maxBytesPerSecond") == 0,
                  "clearing the speed limit in the dashboard did not lift it")


    def cluster_row(self):
        return self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#cluster-rows tr[data-key]'))"
            ".find((row) => row.dataset.key === arguments[0]) || null;", self.args.cluster_job)

    def cluster(self):
        self.step(9, "the Cluster tab lists the shared queue's job, pauses it, and lists the worker")
        self.click("#cluster-tab")
        self.visible("#cluster-view")
        if self.css("#downloads-view").is_displayed():
            raise StepFailed("the downloads list stayed on screen beside the Cluster tab")

        def listed(_driver):
            row = self.cluster_row()
            return row if row is not None and row.get_attribute("data-state") == "available" else False
        row = self.wait(listed, f"no available job {self.args.cluster_job!r} in the Cluster tab")
        button = row.find_element(By.CSS_SELECTOR, ".cluster-pause")
        if not button.is_displayed():
            raise StepFailed("the waiting job's Pause button is not shown")
        button.click()
        self.wait(lambda d: (self.cluster_row() is not None
                             and self.cluster_row().get_attribute("data-state") == "paused"),
                  "the job never showed as paused after pressing Pause")
        if self.args.cluster_worker:
            self.wait(lambda d: any(cell.text.strip() == self.args.cluster_worker for cell in
                                    self.driver.find_elements(By.CSS_SELECTOR, "#cluster-worker-rows td")),
                      f"the worker {self.args.cluster_worker!r} is not listed")


def report_failure(driver, test, error):
    message = str(error).strip() or type(error).__name__
    if hasattr(error, "msg") and error.msg:  # WebDriverException: its message without the stack
        message = error.msg.strip()
    print(f"FAIL: {test.step_name}: {message}", flush=True)
    print(f"  download as the API sees it: {test.server_view()}", flush=True)
    try:
        toast = driver.find_element(By.CSS_SELECTOR, "#toast")
        if toast.is_displayed():
            print(f"  dashboard message: {toast.text}", flush=True)
    except Exception:
        pass
    try:
        entries = driver.get_log("browser")
        print("  browser console:" if entries else "  browser console: (empty)", flush=True)
        for entry in entries:
            print(f"    [{entry.get('level')}] {entry.get('message')}", flush=True)
    except Exception as log_error:
        print(f"  browser console: unavailable ({type(log_error).__name__})", flush=True)
    try:
        driver.save_screenshot(FAILURE_SCREENSHOT)
        print(f"  screenshot: {FAILURE_SCREENSHOT}", flush=True)
    except Exception:
        pass


def main():
    args = parse_args()
    token = os.environ.get("HAUL_TOKEN", "")
    if not token:
        print("FAIL: setup: HAUL_TOKEN is not set in the environment", flush=True)
        return 1
    driver = start_browser()
    test = DashboardTest(driver, args, token)
    try:
        test.run()
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - every failure is reported the same way
        report_failure(driver, test, error)
        return 1
    finally:
        try:
            driver.quit()
        except WebDriverException:
            pass
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
