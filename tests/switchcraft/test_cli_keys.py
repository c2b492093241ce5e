"""`switchcraft keys add|set|revoke|list` against a real state store file, and the keys it writes as a gateway's
KeyStore reads them.

    .venv/bin/python -m pytest -q tests/switchcraft/test_cli_keys.py
"""

from __future__ import annotations

import asyncio
import json

import yaml
from typer.testing import CliRunner

from serving.core.auth import AuthSettings, KeyStore, hash_key
from serving.core.managed_keys import store_keys
from serving.core.state import SQLiteState
from switchcraft.cli import app
from tests.routers import REPO

CONFIG = str(REPO / "configs" / "serving.yaml")
IN_POOL = "gpt-4o-mini"  # a model of the config's pool (configs/pools/bfcl_v3_2025.yaml)


def keys(tmp_path, *args, env: dict | None = None):
    return CliRunner().invoke(app, ["keys", *args, "--config", CONFIG, "--state", str(tmp_path)], env=env,
                              terminal_width=200)


def loaded(tmp_path) -> KeyStore:
    """A gateway's keys over the store the commands wrote (no seed)."""
    store = SQLiteState(tmp_path / "state.sqlite")
    keystore = store_keys(AuthSettings(keys_env=None), None, store)

    async def go():
        await keystore.start()
        await store.aclose()
    asyncio.run(go())
    return keystore


def test_add_prints_the_key_once_and_stores_only_its_hash(tmp_path):
    out = keys(tmp_path, "add", "--id", "acme", "--tenant", "acme", "--rpm", "120", "--usd-per-day", "5",
               "--models", f"{IN_POOL}, gpt-4.1")
    assert out.exit_code == 0, out.output
    key = out.stdout.strip()
    assert key.startswith("sk-sc-") and len(key) > 40 and "shown once" in out.stderr
    raw = (tmp_path / "state.sqlite").read_bytes()
    assert key.encode() not in raw and hash_key(key).encode() in raw
    ident = loaded(tmp_path).authenticate(f"Bearer {key}")
    assert (ident.key_id, ident.caller.tenant, ident.admin) == ("acme", "acme", False)
    assert ident.limits.model_dump() == {"requests_per_minute": 120, "usd_per_day": 5.0, "models": [IN_POOL, "gpt-4.1"]}
    admin = keys(tmp_path, "add", "--id", "ops", "--role", "admin")
    assert admin.exit_code == 0 and loaded(tmp_path).authenticate(f"Bearer {admin.stdout.strip()}").admin


def test_set_changes_limits_revoke_refuses_and_list_shows_every_key(tmp_path):
    key = keys(tmp_path, "add", "--id", "acme", "--rpm", "10").stdout.strip()
    out = keys(tmp_path, "set", "acme", "--usd-per-day", "2.5", "--rpm", "none", "--models", IN_POOL)
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == f"acme: rpm none, usd/day 2.5, models {IN_POOL}"
    assert loaded(tmp_path).authenticate(f"Bearer {key}").limits.model_dump() == {
        "requests_per_minute": None, "usd_per_day": 2.5, "models": [IN_POOL]}
    out = keys(tmp_path, "revoke", "acme")
    assert out.exit_code == 0 and out.stdout.strip() == "revoked acme"
    gateway = loaded(tmp_path)
    refused = None
    try:
        gateway.authenticate(f"Bearer {key}")
    except Exception as e:  # noqa: BLE001 - asserted below
        refused = e
    assert refused.status == 401 and refused.reason == "revoked" and key not in refused.message
    assert "already revoked" in keys(tmp_path, "revoke", "acme").stdout
    listed = json.loads(keys(tmp_path, "list", "--json").stdout)
    assert [(k["id"], k["revoked"], k["source"], k["limits"]["usd_per_day"]) for k in listed] == [
        ("acme", True, "managed", 2.5)]
    assert listed[0]["sha256_prefix"] == hash_key(key)[:8] and listed[0]["created"] <= listed[0]["updated"]
    table = keys(tmp_path, "list").stdout
    assert "acme" in table and "yes (" in table and hash_key(key)[:8] + "…" in table and hash_key(key) not in table
    assert key not in table


def test_clear_errors_for_an_unknown_id_a_taken_id_and_a_model_outside_the_pool(tmp_path):
    assert keys(tmp_path, "add", "--id", "acme").exit_code == 0
    for args, words in ((["add", "--id", "acme"], "a key with id 'acme' exists already"),
                        (["add", "--id", "x", "--models", "gpt-5-nope"], "--models: not in the pool: gpt-5-nope"),
                        (["add", "--id", "x", "--role", "owner"], "--role 'owner': give caller or admin"),
                        (["add", "--id", "__explore__"], "--id: '__explore__' is reserved"),
                        (["add", "--id", "x", "--usd-per-day", "lots"], "--usd-per-day 'lots': give a number"),
                        (["set", "nobody", "--rpm", "3"], "no key 'nobody' in the state store; its keys: acme"),
                        (["set", "acme"], "give a limit to change"),
                        (["set", "acme", "--rpm", "0"], "--rpm: Input should be greater than or equal to 1"),
                        (["revoke", "nobody"], "no key 'nobody'")):
        out = keys(tmp_path, *args)
        assert out.exit_code == 1 and words in out.stderr and "Traceback" not in out.output, (args, out.output)
    assert keys(tmp_path, "revoke", "acme").exit_code == 0
    out = keys(tmp_path, "set", "acme", "--rpm", "3")
    assert out.exit_code == 1 and "'acme' is revoked" in out.stderr
    missing = keys(tmp_path / "nowhere", "list")
    assert missing.exit_code == 1 and "no state store at" in missing.stderr


def test_the_commands_seed_the_store_from_the_key_file_and_a_revoked_seed_stays_revoked(tmp_path):
    seed_key = "sk-sc-seed-0123456789abcdefghijklmn"
    key_file = tmp_path / "keys.yaml"
    key_file.write_text(yaml.safe_dump({"keys": [{"id": "seeded", "sha256": hash_key(seed_key)}]}))
    args = ["--set", f"auth.keys_file={key_file}", "--set", "auth.keys_env=NO_SUCH_VARIABLE"]
    out = keys(tmp_path, "add", "--id", "managed", *args)
    assert out.exit_code == 0, out.output
    listed = json.loads(keys(tmp_path, "list", "--json", *args).stdout)
    assert [(k["id"], k["source"]) for k in listed] == [("managed", "managed"), ("seeded", "seed")]
    revoked = keys(tmp_path, "revoke", "seeded", *args)
    assert revoked.exit_code == 0 and "remove it there too" in revoked.stderr
    listed = json.loads(keys(tmp_path, "list", "--json", *args).stdout)  # seeding again adds nothing back
    assert [(k["id"], k["revoked"]) for k in listed] == [("managed", False), ("seeded", True)]
