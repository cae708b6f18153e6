"""The data sources' settings are declared once (fedmoo/hparams/data.py): each conf/data option
composes to its declaration plus what its YAML file changes, the loader receives exactly the
declared settings (keyword-only, no defaults of its own), and a source that declares nothing
takes no keys."""

from __future__ import annotations

import inspect

import pytest
import yaml

from fedmoo import data as fdata
from fedmoo.config import hparams
from fedmoo.cli.config import compose
from fedmoo.errors import UserError
from fedmoo.config.hparams.data import DESCRIBED
from fedmoo.cli.groups import CONF_DIR
from tests.conftest import declare_impl

SLUGS = sorted(hparams.options("data"))


def _loader(slug):
    return hparams.component("data", slug)


def _declared_defaults(slug) -> dict:
    out = {"name": slug}
    for k in hparams.knobs("data", slug):
        d = k.default
        out[k.key.partition(".")[2]] = list(d) if isinstance(d, tuple) else d
    return out


def test_every_source_and_option_is_declared():
    assert SLUGS == sorted(p.stem for p in (CONF_DIR / "data").glob("*.yaml"))
    assert all(hparams.declared("data", s) is not None for s in SLUGS)


@pytest.mark.parametrize("slug", SLUGS)
def test_an_option_is_its_declaration_plus_its_yaml(slug):
    shipped = yaml.safe_load((CONF_DIR / "data" / f"{slug}.yaml").read_text())
    assert shipped["defaults"][0] == f"/hparams/data/{slug}@data"
    want = {**_declared_defaults(slug), **shipped.get("data", {})}
    assert compose([f"data={slug}"], resolve=False)["data"] == want


@pytest.mark.parametrize("slug", SLUGS)
def test_the_loader_takes_exactly_the_declared_settings(slug):
    params = list(inspect.signature(_loader(slug)).parameters.values())[1:]   # after data_dir
    assert all(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params)
    settings = [k.key.partition(".")[2] for k in hparams.knobs("data", slug)]
    assert sorted(p.name for p in params) == sorted(s for s in settings if s not in DESCRIBED)


@pytest.mark.parametrize("slug", ["synthetic", "celeba", "fmnist", "riverflow"])
def test_the_loader_gets_the_composed_settings(slug, monkeypatch):
    section = compose([f"data={slug}", "num_clients=7"])["data"]
    got = {}

    def record(data_dir, **settings):
        got.update(settings)
        raise UserError("recorded")

    declare_impl(monkeypatch, "data", slug, record)
    with pytest.raises(UserError, match="recorded"):
        fdata.load_source(section, ".")
    assert got == {k: v for k, v in section.items() if k not in ("name", *DESCRIBED)}
    if slug == "synthetic":
        assert got["num_users"] == 7 and got["alpha"] == 1.0     # ${num_clients}; declared


def test_a_python_caller_gets_the_declared_defaults(monkeypatch):
    got = {}
    declare_impl(monkeypatch, "data", "cifar10", lambda d, **kw: got.update(kw) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        fdata.load_source({"name": "cifar10", "verify": True}, ".")
    assert got == {"normalize": "standard", "download": True, "verify": True}
    with pytest.raises(UserError, match=r"^data.verify='yes' must be true or false"):
        fdata.load_source({"name": "cifar10", "verify": "yes"}, ".")


def test_an_undeclared_source_is_unknown_and_a_bare_one_takes_no_keys(monkeypatch):
    with pytest.raises(UserError, match=r"^unknown data 'bare'; choose one of: adult, "):
        fdata.load_source({"name": "bare"}, ".")
    declare_impl(monkeypatch, "data", "bare", lambda d: 1 / 0)
    with pytest.raises(UserError, match=r"^data.size is not a hyperparameter of data=bare; "
                                        r"valid keys: \(none\)"):
        fdata.load_source({"name": "bare", "size": 3}, ".")


def test_old_results_get_the_declared_defaults():
    from fedmoo.report.defaults import MISSING, default

    assert default("data.normalize", {"data.name": "fmnist"}) == "pixel_zscore"
    assert default("data.verify", {"data.name": "cifar100"}) is False
    assert default("data.num_users", {"data.name": "synthetic"}) is MISSING   # ${num_clients}
