"""Every page carries a Content-Security-Policy that allows no inline script or style, and the
dashboard's templates contain none (their scripts and styles are files under static/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from controlplane.apps.accounts.roles import Role
from tests.controlplane.conftest import make_user

TEMPLATES = Path(__file__).resolve().parents[2] / "frontend" / "templates"
INLINE_SCRIPT = r"<script(?![^>]*\bsrc=)[^>]*>"


@pytest.mark.parametrize("path", ["/login/", "/", "/tasks/", "/admin/login/"])
def test_pages_carry_a_strict_policy(db: None, path: str) -> None:
    client = Client()
    client.force_login(make_user(Role.VIEWER))

    response = client.get(path)

    policy = response["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy


def test_templates_have_no_inline_script_style_or_handler() -> None:
    offences = []
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        offences += [f"{template.name}: {m.group(0)}" for m in re.finditer(INLINE_SCRIPT, text)]
        offences += [
            f"{template.name}: {m.group(0)}" for m in re.finditer(r"<style\b|\sstyle=|\son[a-z]+=", text)
        ]
    assert offences == []


def test_the_api_docs_page_loads_its_init_script_as_a_file(db: None) -> None:
    client = Client()
    client.force_login(make_user(Role.VIEWER))

    page = client.get("/api/docs/")
    script = client.get("/api/docs/", {"script": ""})

    assert page.status_code == 200
    assert re.findall(INLINE_SCRIPT, page.content.decode()) == []
    assert b"<style" not in page.content
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
