"""accelerate, PEFT and sentence-transformers, unchanged, with plain safetensors and under
hoist.safetensors.patch(): one load per process, timed around the call alone, every parameter
fingerprinted (from_pretrained.py's fingerprint) for a bit-for-bit comparison between modes.

    python3 consumers.py make DIR            # DIR/peft-base, DIR/peft-adapter, DIR/sentence
    python3 consumers.py load WHAT DIR --mode plain|patch [--fingerprint FILE] [--tag TAG]

WHAT: accelerate (load_checkpoint_and_dispatch of the llama checkpoint DIR onto cuda:0, into a
model built with init_empty_weights), peft (PeftModel.from_pretrained of DIR/peft-adapter onto
DIR/peft-base on cuda:0), sentence (SentenceTransformer(DIR/sentence, device="cuda:0"), its
embedding of two sentences fingerprinted too). Prints one JSON line per load; from_pretrained.py
compare compares two fingerprint files.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from from_pretrained import fingerprint  # noqa: E402


def make(directory):
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast, LlamaConfig, \
        LlamaForCausalLM
    torch.manual_seed(0)
    base = os.path.join(directory, "peft-base")
    config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                         num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(base)
    from peft import LoraConfig, get_peft_model
    peft_model = get_peft_model(model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:  # lora_B starts at zero: trained-like values instead
                p.normal_(0.0, 0.02)
    peft_model.save_pretrained(os.path.join(directory, "peft-adapter"))

    bert = os.path.join(directory, "bert")
    os.makedirs(bert, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + \
        [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        "the a weights load fast from disk to the gpu hoist model".split()
    with open(os.path.join(bert, "vocab.txt"), "w") as f:
        f.write("\n".join(dict.fromkeys(words)) + "\n")
    BertTokenizerFast(vocab_file=os.path.join(bert, "vocab.txt")).save_pretrained(bert)
    BertModel(BertConfig(vocab_size=len(dict.fromkeys(words)), hidden_size=384,
                         num_hidden_layers=6, num_attention_heads=12,
                         intermediate_size=1536)).save_pretrained(bert)
    from sentence_transformers import SentenceTransformer, models
    word = models.Transformer(bert)
    SentenceTransformer(modules=[word, models.Pooling(word.get_word_embedding_dimension())]) \
        .save(os.path.join(directory, "sentence"))
    print(json.dumps({"made": directory}))


def load(what, directory, mode, fingerprint_file, tag):
    import torch
    torch.zeros(1, device="cuda")
    if mode == "patch":
        import hoist.safetensors
        hoist.safetensors.patch()
    extra = {}
    torch.cuda.synchronize()
    if what == "accelerate":
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch
        from transformers import AutoConfig, AutoModelForCausalLM
        config = AutoConfig.from_pretrained(directory)
        with init_empty_weights():
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        start = time.perf_counter()
        model = load_checkpoint_and_dispatch(model, directory, device_map={"": 0},
                                             dtype=torch.bfloat16)
    elif what == "peft":
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        start = time.perf_counter()
        base = AutoModelForCausalLM.from_pretrained(os.path.join(directory, "peft-base"),
                                                    device_map="cuda:0", dtype=torch.bfloat16)
        model = PeftModel.from_pretrained(base, os.path.join(directory, "peft-adapter"))
    else:
        from sentence_transformers import SentenceTransformer
        start = time.perf_counter()
        model = SentenceTransformer(os.path.join(directory, "sentence"), device="cuda:0")
        extra["embedding"] = model.encode(["hoist the weights", "load from disk fast"],
                                          convert_to_tensor=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    state = model.state_dict()
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    record = {"tag": tag or f"{what}-{mode}", "what": what, "mode": mode,
              "seconds": round(seconds, 3), "gb": round(nbytes / 1e9, 3),
              "tensors": len(state), "devices": sorted({str(t.device) for t in state.values()})}
    if fingerprint_file:
        prints = {name: [str(t.dtype), list(t.shape)] + fingerprint(t) for name, t in state.items()}
        prints.update({f"<{k}>": [str(t.dtype), list(t.shape)] + fingerprint(t)
                       for k, t in extra.items()})
        with open(fingerprint_file, "w") as f:
            json.dump(prints, f)
    print(json.dumps(record), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("directory")
    p = sub.add_parser("load")
    p.add_argument("what", choices=["accelerate", "peft", "sentence"])
    p.add_argument("directory")
    p.add_argument("--mode", choices=["plain", "patch"], required=True)
    p.add_argument("--fingerprint")
    p.add_argument("--tag")
    args = parser.parse_args()
    if args.command == "make":
        make(args.directory)
    else:
        load(args.what, args.directory, args.mode, args.fingerprint, args.tag)


if __name__ == "__main__":
    main()
