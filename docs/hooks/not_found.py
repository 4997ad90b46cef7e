"""mkdocs hook: ``404.html`` works wherever the site is served, at a domain's root or under a sub-path.

A server shows 404.html at any missing address, at any depth, so mkdocs writes its links site-absolute (``/assets/…``,
from ``site_url``, which names no sub-path here): under ``https://host/kmq/`` its styles, scripts and every link
pointed outside the site. Here the page finds the site's root in its own address when it loads (the path up to the
first segment that is one of the site's top-level directories, or up to the last segment), writes it as the page's
``<base>``, and every link of the page is relative to it. With ``site_url`` set, mkdocs' own links are right as
they are.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: The site's top-level directories (``guides``, ``assets``, …), collected from the files mkdocs builds.
_TOP_LEVEL: set[str] = {"assets", "search", "stylesheets"}

_SITE_ABSOLUTE = re.compile(r'(\s(?:href|src)=")/(?!/)')

ROOT_SCRIPT = """<script>
(function () {
  var top = %s, parts = location.pathname.split("/").filter(Boolean), i = 0;
  while (i < parts.length && top.indexOf(parts[i]) < 0) i++;
  if (i === parts.length) i = Math.max(0, parts.length - 1);
  var root = "/" + parts.slice(0, i).join("/") + (i ? "/" : "");
  window.__kmqSiteRoot = root;
  document.write('<base href="' + root + '">');
})();
</script>"""

# Material reads its base (search index, links) from the __config JSON when its bundle starts.
CONFIG_SCRIPT = """<script>
(function () {
  var element = document.getElementById("__config"), config = JSON.parse(element.textContent);
  ["base", "search"].forEach(function (key) {
    if (typeof config[key] === "string" && config[key].charAt(0) === "/")
      config[key] = window.__kmqSiteRoot + config[key].slice(1);
  });
  element.textContent = JSON.stringify(config);
})();
</script>"""


def on_files(files: Any, config: Any, **_: Any) -> Any:
    for file in files:
        first = file.url.split("/", 1)[0]
        if first and "." not in first:
            _TOP_LEVEL.add(first)
    return files


def relative_404(html: str, top_level: set[str]) -> str:
    """404.html with its site-absolute links made relative to a ``<base>`` found at load time."""
    html = _SITE_ABSOLUTE.sub(r"\1", html)
    html = html.replace("<head>", "<head>" + ROOT_SCRIPT % json.dumps(sorted(top_level)), 1)
    config_end = html.find("</script>", html.find('id="__config"'))
    if config_end >= 0:
        config_end += len("</script>")
        html = html[:config_end] + CONFIG_SCRIPT + html[config_end:]
    return html


def on_post_template(output_content: str, template_name: str, config: Any, **_: Any) -> str:
    if template_name != "404.html" or config.site_url:
        return output_content
    return relative_404(output_content, _TOP_LEVEL)
