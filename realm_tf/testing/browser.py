"""A real headless browser on bin/serve's page: Debian's chromium driven by selenium through Debian's
chromedriver (selenium's own driver download is never used: nothing is fetched at runtime).

Used by bin/serve_test (a person's path through the page) and tools/serve_screenshot (docs/serve_page.png).
"""

import os
import shutil
import tempfile
from typing import NamedTuple, Optional

# Debian's packages `chromium` and `chromium-driver` (bin/setup_env.sh installs them for bin/test).
_BROWSERS = ("chromium", "chromium-browser")
_DRIVERS = ("chromedriver",)


class Chromium(NamedTuple):
  browser: str
  driver: str


def find_chromium() -> Optional[Chromium]:
  """The installed chromium and chromedriver, or None when either is missing."""
  browser = next(filter(None, map(shutil.which, _BROWSERS)), None)
  driver = next(filter(None, map(shutil.which, _DRIVERS)), None)
  return Chromium(browser, driver) if browser and driver else None


def missing_reason() -> str:
  return ("Debian's chromium and chromium-driver are not installed (apt-get install chromium "
          "chromium-driver; bin/test installs them)")


class HeadlessChromium:
  """A headless chromium session (a context manager): .driver is selenium's WebDriver.

  Args:
    width, height: the window, in CSS pixels (screenshots are this size).
  """

  def __init__(self, width: int = 1000, height: int = 1200):
    from selenium import webdriver  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    from selenium.webdriver.chrome import service  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    found = find_chromium()
    if found is None:
      raise FileNotFoundError(missing_reason())
    # Its own profile directory: HOME may be read-only or shared (Bazel's sandbox, parallel tests).
    self._profile = tempfile.mkdtemp(prefix="realm_tf_chromium_")
    options = webdriver.ChromeOptions()
    options.binary_location = found.browser
    for argument in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--no-default-browser-check", "--disable-extensions", f"--window-size={width},{height}",
                     f"--user-data-dir={self._profile}"):
      options.add_argument(argument)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
      options.add_argument("--no-sandbox")  # chromium refuses to run its sandbox as root
    try:
      self.driver = webdriver.Chrome(options=options, service=service.Service(found.driver))
    except Exception:
      shutil.rmtree(self._profile, ignore_errors=True)
      raise

  def ask(self, base_url: str, question: str, timeout_s: float = 120.0) -> str:
    """Opens the page, types question into its box, presses Ask and returns the answer shown (or the
    error shown), as a person would see them."""
    from selenium.webdriver.common import by  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    from selenium.webdriver.support import expected_conditions  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    from selenium.webdriver.support import ui  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    self.driver.set_page_load_timeout(timeout_s)
    self.driver.get(base_url.rstrip("/") + "/")
    box = self.driver.find_element(by.By.ID, "question")
    box.clear()
    box.send_keys(question)
    self.driver.find_element(by.By.ID, "ask").click()
    shown = ui.WebDriverWait(self.driver, timeout_s).until(
        expected_conditions.any_of(expected_conditions.presence_of_element_located((by.By.ID, "answer-text")),
                                   expected_conditions.presence_of_element_located((by.By.ID, "error"))))
    return shown.text

  def close(self):
    try:
      self.driver.quit()
    finally:
      shutil.rmtree(self._profile, ignore_errors=True)

  def __enter__(self) -> "HeadlessChromium":
    return self

  def __exit__(self, *exc):
    self.close()
