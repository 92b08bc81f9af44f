"""k8s: the NetworkPolicies let each role reach what it needs and no more, and the
Secret comes only from each overlay's generator, fed by a file nobody commits.

Rendering the overlay (kubectl kustomize) and validating it against the Kubernetes
schemas is in .ci/static-checks; this file checks what the files say.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
import yaml

from tests.unit.manifests_harness import (
    OVERLAY_SECRET,
    ROLE_PORTS,
    ROOT,
    Doc,
    of_kind,
    selects,
)
from timer_service.constants import (
    BUCKET_COLLECTION_PREFIX,
    DEFAULT_BUCKETS,
    LOCATOR_COLLECTION,
    SECONDS_COLLECTION,
)
from timer_service.settings import Settings

OVERLAYS = [ROOT / "k8s" / "overlays" / name for name in ("example", "sharded")]
SHARDED = OVERLAYS[1]
MONGODB, AMQP, AMQPS, DNS = 27017, 5672, 5671, 53


# -- network policies ------------------------------------------------------------------


def policy_for(rendered: list[Doc], role: str) -> Doc:
    (deployment,) = [
        d
        for d in of_kind(rendered, "Deployment")
        if d["spec"]["template"]["spec"]["containers"][0]["args"][0] == role
    ]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    policies = [
        p
        for p in of_kind(rendered, "NetworkPolicy")
        if selects(p["spec"]["podSelector"]["matchLabels"], labels)
    ]
    assert len(policies) == 1, (
        f"{role}: expected one NetworkPolicy, got {[p['metadata']['name'] for p in policies]}"
    )
    (policy,) = policies
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"], policy["metadata"][
        "name"
    ]
    return policy


def named_port(rendered: list[Doc], role: str, name: str) -> int:
    for d in of_kind(rendered, "Deployment"):
        (container,) = d["spec"]["template"]["spec"]["containers"]
        if container["args"][0] == role:
            return next(p["containerPort"] for p in container["ports"] if p["name"] == name)
    raise AssertionError(f"no {role} Deployment")


def ingress_ports(policy: Doc, rendered: list[Doc], role: str) -> set[int]:
    ports = set()
    for rule in policy["spec"].get("ingress", []):
        for port in rule.get("ports", []):
            value = port["port"]
            ports.add(named_port(rendered, role, value) if isinstance(value, str) else value)
    return ports


def egress_ports_to_anywhere(policy: Doc) -> set[int]:
    """Ports allowed to any destination (rules without `to`)."""
    return {
        port["port"]
        for rule in policy["spec"].get("egress", [])
        if "to" not in rule
        for port in rule.get("ports", [])
    }


def egress_blocks(policy: Doc) -> list[Doc]:
    return [
        peer["ipBlock"]
        for rule in policy["spec"].get("egress", [])
        for peer in rule.get("to", [])
        if "ipBlock" in peer
    ]


def allowed_by_blocks(blocks: list[Doc], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    for block in blocks:
        net = ipaddress.ip_network(block["cidr"])
        if ip.version == net.version and ip in net:
            if not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])):
                return True
    return False


@pytest.mark.parametrize("role", sorted(ROLE_PORTS))
def test_each_role_admits_only_its_port(rendered: list[Doc], role: str) -> None:
    policy = policy_for(rendered, role)
    got = ingress_ports(policy, rendered, role)
    assert got == {ROLE_PORTS[role]}, f"{role}: ingress on {got}, expected {ROLE_PORTS[role]}"
    if role != "api":  # metrics ports: Prometheus only
        for rule in policy["spec"]["ingress"]:
            peers = rule.get("from", [])
            labels = [p.get("podSelector", {}).get("matchLabels", {}) for p in peers]
            assert labels and all(
                lbl.get("app.kubernetes.io/name") == "prometheus" for lbl in labels
            ), f"{role}: metrics ingress from {peers}"


@pytest.mark.parametrize(
    ("role", "ports"),
    [
        ("api", {MONGODB, DNS}),
        ("daemon", {MONGODB, AMQP, AMQPS, DNS}),
        ("broker", {MONGODB, AMQP, AMQPS, DNS}),
    ],
)
def test_each_role_reaches_its_dependencies(
    rendered: list[Doc], role: str, ports: set[int]
) -> None:
    got = egress_ports_to_anywhere(policy_for(rendered, role))
    assert got == ports, (
        f"{role}: egress to any destination on {sorted(got)}, expected {sorted(ports)}"
    )


def test_only_the_broker_reaches_callbacks_and_never_the_metadata_range(
    rendered: list[Doc],
) -> None:
    for role in ("api", "daemon"):
        assert egress_blocks(policy_for(rendered, role)) == [], f"{role} has general egress"
    blocks = egress_blocks(policy_for(rendered, "broker"))
    for address in ("93.184.216.34", "10.1.2.3", "2606:2800:220:1::1"):
        assert allowed_by_blocks(blocks, address), f"callbacks to {address} are blocked"
    for address in ("169.254.169.254", "169.254.1.1", "fd00:ec2::254", "fe80::1"):
        assert not allowed_by_blocks(blocks, address), f"callbacks to {address} are allowed"


# -- the Secret --------------------------------------------------------------------------


def test_the_base_ships_no_secret_and_no_placeholder(rendered: list[Doc]) -> None:
    assert of_kind(rendered, "Secret") == [], "the base must not ship a Secret"
    placeholders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "k8s").rglob("*")
        if path.is_file() and re.search(r"CHANGE_?ME", path.read_text(), re.IGNORECASE)
    ]
    assert placeholders == [], f"placeholder credentials in {placeholders}"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda path: path.name)
def test_the_overlay_generates_the_secret_from_an_uncommitted_file(overlay: Path) -> None:
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert "../../base" in kustomization["resources"], kustomization["resources"]
    (generator,) = kustomization["secretGenerator"]
    assert generator["name"] == OVERLAY_SECRET, generator
    sources = set(generator) - {"name", "type"}
    assert sources == {"env"} and generator["env"] == "secrets.env", (
        f"expected the values only from secrets.env, got {generator}"
    )
    ignored = (overlay / ".gitignore").read_text().split()
    assert "secrets.env" in ignored, f"secrets.env is not git-ignored: {ignored}"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda path: path.name)
def test_the_example_secrets_file_has_no_token_and_only_known_settings(overlay: Path) -> None:
    entries = dict(
        line.split("=", 1)
        for line in (overlay / "secrets.env.example").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert "TIMER_API_TOKEN" not in entries, "the example must not carry a token"
    known = {f"TIMER_{name.upper()}" for name in Settings.model_fields}
    assert set(entries) <= known, f"unknown settings: {set(entries) - known}"
    assert {"TIMER_MONGO_URL", "TIMER_AMQP_URL"} <= set(entries), entries


def test_the_sharding_script_names_the_stores_collections() -> None:
    """shard.js (k8s/overlays/sharded) shards the collections the service writes."""
    script = (SHARDED / "shard.js").read_text()
    for name in (SECONDS_COLLECTION, LOCATOR_COLLECTION):
        assert f'shard("{name}", ' in script, name
    # Fields a job never changes: an in-place move to another second must not touch it.
    assert f"shard(`{BUCKET_COLLECTION_PREFIX}${{n}}`, {{ partition: 1, _id: 1 }})" in script
    assert f'process.env.TIMER_BUCKETS || "{DEFAULT_BUCKETS}"' in script


def test_an_empty_token_is_refused_rather_than_running_without_auth() -> None:
    with pytest.raises(ValueError, match="TIMER_API_TOKEN is empty"):
        Settings(_env_file=None, api_token="")  # type: ignore[call-arg]
