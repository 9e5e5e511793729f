r"""Screenshots bin/serve's page after asking it a question in headless chromium (docs/serve_page.png).

  .venv/bin/python bin/serve.py --saved_model=demo_output/pipeline/export/open_qa &
  .venv/bin/python tools/serve_screenshot.py --url=http://127.0.0.1:8501 \
      --question="Where was Savix Lunene born?" --output=docs/serve_page.png

Needs Debian's chromium and chromium-driver (bin/test installs them).
"""

from absl import app
from absl import flags

from realm_tf.testing import browser

_URL = flags.DEFINE_string("url", "http://127.0.0.1:8501", "The running bin/serve's address.")
_QUESTION = flags.DEFINE_string("question", "Where was Savix Lunene born?", "What to ask on the page.")
_OUTPUT = flags.DEFINE_string("output", "docs/serve_page.png", "The PNG written.")
_WIDTH = flags.DEFINE_integer("width", 1000, "Window width (CSS pixels).")
_HEIGHT = flags.DEFINE_integer("height", 1100, "Window height (CSS pixels).")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; pass the question with --question")
  if browser.find_chromium() is None:
    raise app.UsageError(browser.missing_reason())
  with browser.HeadlessChromium(_WIDTH.value, _HEIGHT.value) as chromium:
    answer = chromium.ask(_URL.value, _QUESTION.value)
    if not chromium.driver.save_screenshot(_OUTPUT.value):
      raise RuntimeError(f"chromium could not write {_OUTPUT.value}")
  print(f"asked {_QUESTION.value!r}, the page answered {answer!r}; wrote {_OUTPUT.value}")


if __name__ == "__main__":
  app.run(main)
