"""An HTTP client of the control plane's REST API (``/api/v1/``): typed methods, one error type.

Every failure (the API refused, the credentials were refused, the server broke or could not be reached)
is raised as :class:`ApiError`, which carries the API's own words and the exit code a script can test.
"""

from __future__ import annotations

import html as htmllib
import re
import time
from collections.abc import Mapping, Sequence
from enum import IntEnum
from types import TracebackType
from typing import Any, TypedDict, cast

import httpx

API_PREFIX = "/api/v1/"
DEFAULT_TIMEOUT_S = 15.0
RETRIES = 3
"""How often a request the server rolled back (503, code ``retry``) is sent again."""
MAX_RETRY_AFTER_S = 10.0


class ExitCode(IntEnum):
    """The exit codes of every ``unicron`` command."""

    OK = 0
    API_REFUSED = 1
    """The API refused the request (a 4xx other than 401/403): bad input, not found, wrong state."""
    USAGE = 2
    """The command line or a file it names is wrong (nothing was sent)."""
    AUTH = 3
    """Not logged in, or the server refused the credentials or the role (401/403)."""
    SERVER = 4
    """The server failed (5xx), answered something that is not the API, or could not be reached."""
    TASK_FAILED = 5
    """``tasks watch``: the task ended failed or cancelled."""


class ApiError(Exception):
    """A request that did not succeed. ``status`` is None when no HTTP answer came back."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        payload: object = None,
        exit_code: ExitCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.payload = payload
        self._exit_code = exit_code

    @property
    def exit_code(self) -> ExitCode:
        if self._exit_code is not None:
            return self._exit_code
        if self.status in (401, 403):
            return ExitCode.AUTH
        if self.status is not None and 400 <= self.status < 500:
            return ExitCode.API_REFUSED
        return ExitCode.SERVER

    @property
    def transient(self) -> bool:
        """Worth retrying: no answer, or the server failed (5xx)."""
        return self.status is None or self.status >= 500


def error_words(payload: object) -> str:
    """The API's error envelope as one readable line.

    ``{"detail": ..., "code": ...}`` gives the detail; field errors ``{"field": ["msg", ...]}`` give
    ``field: msg``; nested field errors (a list of devices, say) are flattened to ``devices[0].kind: msg``;
    ``non_field_errors`` are shown without a field name."""
    parts: list[str] = []

    def walk(value: object, where: str) -> None:
        if isinstance(value, Mapping):
            if where == "" and "detail" in value and set(value) <= {"detail", "code"}:
                parts.append(str(value["detail"]))
                return
            for key, inner in value.items():
                name = "" if key in ("non_field_errors", "detail") else str(key)
                walk(inner, f"{where}.{name}" if where and name else (where or name))
        elif isinstance(value, Sequence) and not isinstance(value, str):
            if all(isinstance(v, str) for v in value):
                text = " ".join(cast(Sequence[str], value))
                parts.append(f"{where}: {text}" if where else text)
            else:
                for index, inner in enumerate(value):
                    if inner:
                        walk(inner, f"{where}[{index}]")
        elif value is not None:
            parts.append(f"{where}: {value}" if where else str(value))

    walk(payload, "")
    return "; ".join(parts)


class Page(TypedDict):
    """A list endpoint's answer (limit/offset pagination)."""

    count: int
    next: str | None
    previous: str | None
    results: list[dict[str, Any]]


JSON = dict[str, Any]


class UnicronClient:
    """A session with one server, authenticated by a user's API token (``Authorization: Token ...``)."""

    def __init__(
        self,
        server: str,
        token: str | None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.server = normalise_server(server)
        headers = {"Accept": "application/json", "User-Agent": "unicron-cli"}
        if token:
            headers["Authorization"] = f"Token {token}"
        self._http = httpx.Client(base_url=self.server + API_PREFIX, headers=headers, timeout=timeout)

    def __enter__(self) -> UnicronClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ transport
    def request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, body: object = None
    ) -> Any:
        """Send one request and return the decoded JSON answer, or raise :class:`ApiError`.

        A 503 whose code is ``retry`` (the server rolled the request back after a deadlock: nothing was
        written) is sent again after its ``Retry-After``, up to ``RETRIES`` times."""
        query = {k: v for k, v in (params or {}).items() if v is not None and v != []}
        for attempt in range(RETRIES + 1):
            try:
                response = self._http.request(
                    method, path.lstrip("/"), params=query, json=body if method != "GET" else None
                )
            except httpx.TimeoutException as exc:
                raise ApiError(f"{self.server} did not answer in time ({type(exc).__name__})") from exc
            except httpx.HTTPError as exc:
                raise ApiError(f"cannot reach {self.server}: {exc or type(exc).__name__}") from exc
            if attempt < RETRIES and _asks_to_retry(response):
                time.sleep(_retry_after_s(response))
                continue
            break
        return self._decode(response)

    def _decode(self, response: httpx.Response) -> Any:
        try:
            payload: Any = response.json()
        except ValueError:
            payload = None
        if response.is_success:
            if payload is None and response.status_code != 204:
                raise ApiError(
                    f"{self.server} answered {response.status_code} without JSON: is it the control "
                    "plane's address?",
                    response.status_code,
                )
            return payload
        status = response.status_code
        if response.is_redirect:
            target = response.headers.get("Location", "")
            raise ApiError(
                f"the server redirects {response.request.url.path} to {target}: log in to that address "
                "(https:// when the server requires it)",
                status,
            )
        words = error_words(payload) if payload is not None else ""
        if not words:
            words = f"HTTP {status} {response.reason_phrase}".strip()
            if status == 404 and payload is None:
                words += f" ({response.request.url.path}: is {self.server} the control plane?)"
        raise ApiError(words, status, payload)

    def _page(self, path: str, params: Mapping[str, Any]) -> Page:
        return cast(Page, self.request("GET", path, params=params))

    # ------------------------------------------------------------------ accounts
    def me(self) -> JSON:
        """The calling user and their role (checks the credentials)."""
        return cast(JSON, self.request("GET", "me/"))

    def issue_token_with_password(self, username: str, password: str) -> JSON:
        """A new API token for ``username``: log in through the dashboard's login form (a session, so
        the server's login throttling, lock-out and audit apply), ``POST me/token/`` (which replaces
        the user's previous token) and log the session out again. Returns ``{token, prefix,
        expires_at}``."""
        login_url = f"{self.server}/login/"
        try:
            page = self._http.get(login_url)
            if page.status_code != 200:
                raise ApiError(
                    f"{login_url} answered HTTP {page.status_code}, not the login form: is {self.server} the "
                    "control plane's address (https:// if it redirects)?",
                    page.status_code,
                    exit_code=ExitCode.SERVER if page.status_code >= 500 else ExitCode.API_REFUSED,
                )
            form = {
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": self._csrf_token(page.text),
                "next": "/",
            }
            answer = self._http.post(login_url, data=form, headers={"Referer": login_url})
            if answer.status_code == 429:
                raise ApiError(
                    "too many failed logins: this user is locked out from this address for a while",
                    429,
                    exit_code=ExitCode.AUTH,
                )
            if answer.status_code != 302:
                words = _form_error(answer.text) or "the server refused the username or password"
                raise ApiError(words, 401 if answer.status_code == 200 else answer.status_code)
            csrf = {"X-CSRFToken": self._http.cookies.get("csrftoken") or "", "Referer": login_url}
            issued = self._decode(self._http.post("me/token/", headers=csrf))
            self._http.post(f"{self.server}/logout/", headers=csrf)
        except httpx.TimeoutException as exc:
            raise ApiError(f"{self.server} did not answer in time ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach {self.server}: {exc or type(exc).__name__}") from exc
        finally:
            self._http.cookies.clear()
        return cast(JSON, issued)

    def _csrf_token(self, html: str) -> str:
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        if match:
            return match.group(1)
        cookie = self._http.cookies.get("csrftoken")
        if cookie:
            return str(cookie)
        raise ApiError(f"{self.server}/login/ has no login form: is it the control plane's address?", 404)

    def list_my_tokens(self) -> list[JSON]:
        """The calling user's API tokens (prefix, created, expires, last used; never the key)."""
        return cast(list[JSON], self.request("GET", "me/token/"))

    def rotate_my_token(self) -> JSON:
        """A new API token for the calling user (``{token, prefix, expires_at}``); the one this client
        authenticates with stops working."""
        return cast(JSON, self.request("POST", "me/token/"))

    # ------------------------------------------------------------------ tasks
    def list_tasks(
        self,
        state: Sequence[str] = (),
        name: str | None = None,
        owner: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> Page:
        params = {"state": list(state), "name": name, "owner": owner, "limit": limit, "offset": offset}
        return self._page("tasks/", params)

    def get_task(self, task_id: int) -> JSON:
        return cast(JSON, self.request("GET", f"tasks/{task_id}/"))

    def submit_task(self, spec: Mapping[str, Any]) -> JSON:
        return cast(JSON, self.request("POST", "tasks/", body=dict(spec)))

    def change_weight(self, task_id: int, weight: float) -> JSON:
        return cast(JSON, self.request("POST", f"tasks/{task_id}/change-weight/", body={"weight": weight}))

    def cancel_task(self, task_id: int) -> JSON:
        return cast(JSON, self.request("POST", f"tasks/{task_id}/cancel/"))

    def task_series(
        self, task_id: int, kind: str, since: str | None = None, max_points: int | None = None
    ) -> JSON:
        """A task's metric series (``iteration_time``, ``tokens_per_s``, ``achieved_flops``)."""
        params = {"kind": kind, "since": since, "max_points": max_points}
        return cast(JSON, self.request("GET", f"metrics/tasks/{task_id}/", params=params))

    # ------------------------------------------------------------------ nodes
    def list_nodes(
        self, state: str | None = None, name: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page:
        return self._page("nodes/", {"state": state, "name": name, "limit": limit, "offset": offset})

    def get_node(self, node_id: int) -> JSON:
        return cast(JSON, self.request("GET", f"nodes/{node_id}/"))

    def find_node(self, name_or_id: str) -> JSON:
        """The node with exactly this name; else, for a number, the node with this id."""
        page = self.list_nodes(name=name_or_id, limit=1000)
        for node in page["results"]:
            if node.get("name") == name_or_id:
                return node
        if name_or_id.isdigit():
            return self.get_node(int(name_or_id))
        raise ApiError(f"No node is named {name_or_id!r}.", 404)

    def drain_node(self, node_id: int) -> JSON:
        return cast(JSON, self.request("POST", f"nodes/{node_id}/drain/"))

    def clear_quarantine(self, node_id: int) -> JSON:
        return cast(JSON, self.request("POST", f"nodes/{node_id}/clear-quarantine/"))

    def inject_fault(self, node_id: int, drill: Mapping[str, Any]) -> JSON:
        return cast(JSON, self.request("POST", f"nodes/{node_id}/inject-fault/", body=dict(drill)))

    # ------------------------------------------------------------------ alerts
    def list_alerts(
        self, state: Sequence[str] = (), severity: Sequence[str] = (), limit: int = 50, offset: int = 0
    ) -> Page:
        params = {"state": list(state), "severity": list(severity), "limit": limit, "offset": offset}
        return self._page("alerts/", params)

    def acknowledge_alert(self, alert_id: int, comment: str = "") -> JSON:
        body = {"comment": comment}
        return cast(JSON, self.request("POST", f"alerts/{alert_id}/acknowledge/", body=body))

    def resolve_alert(self, alert_id: int, comment: str) -> JSON:
        return cast(JSON, self.request("POST", f"alerts/{alert_id}/resolve/", body={"comment": comment}))

    # ------------------------------------------------------------------ transitions
    def list_transitions(
        self, task: int | None = None, state: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page:
        return self._page("transitions/", {"task": task, "state": state, "limit": limit, "offset": offset})


def _asks_to_retry(response: httpx.Response) -> bool:
    if response.status_code != 503:
        return False
    try:
        payload = response.json()
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("code") == "retry"


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return 1.0


def _form_error(html: str) -> str:
    """The login form's own error message (the dashboard shows it in an ``error-box``)."""
    match = re.search(r'class="error-box"[^>]*>(.*?)</div>', html, re.DOTALL)
    if not match:
        return ""
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", match.group(1))).strip()


def normalise_server(server: str) -> str:
    """``host:8000``, ``http://host:8000/`` and ``http://host:8000/api/v1`` all name the same server."""
    url = server.strip()
    if not url:
        raise ValueError("the server address is empty")
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    if url.endswith(API_PREFIX.rstrip("/")):
        url = url[: -len(API_PREFIX.rstrip("/"))]
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{server!r} is not an http(s) address")
    return url
