"""Writes the tiny TensorFlow BERT checkpoint beside this file, as Google's BERT code (and MLPerf's phase-1
checkpoint) names its variables, with LAMB-style optimizer slots and a global step; and reference.npz, every
variable as tf.train.load_variable reads it back. Needs TensorFlow (not a project dependency):

    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu && /tmp/tf/bin/python make_checkpoint.py
"""
import json
import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = {"vocab_size": 32, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 16, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 16, "type_vocab_size": 2,
          "initializer_range": 0.02}


def shapes(c):
    h, i = c["hidden_size"], c["intermediate_size"]
    out = {"bert/embeddings/word_embeddings": [c["vocab_size"], h],
           "bert/embeddings/position_embeddings": [c["max_position_embeddings"], h],
           "bert/embeddings/token_type_embeddings": [c["type_vocab_size"], h],
           "bert/embeddings/LayerNorm/gamma": [h], "bert/embeddings/LayerNorm/beta": [h],
           "bert/pooler/dense/kernel": [h, h], "bert/pooler/dense/bias": [h],
           "cls/predictions/transform/dense/kernel": [h, h], "cls/predictions/transform/dense/bias": [h],
           "cls/predictions/transform/LayerNorm/gamma": [h], "cls/predictions/transform/LayerNorm/beta": [h],
           "cls/predictions/output_bias": [c["vocab_size"]],
           "cls/seq_relationship/output_weights": [2, h], "cls/seq_relationship/output_bias": [2]}
    for n in range(c["num_hidden_layers"]):
        p = f"bert/encoder/layer_{n}/"
        for q in ("query", "key", "value"):
            out[p + f"attention/self/{q}/kernel"] = [h, h]
            out[p + f"attention/self/{q}/bias"] = [h]
        out.update({p + "attention/output/dense/kernel": [h, h], p + "attention/output/dense/bias": [h],
                    p + "attention/output/LayerNorm/gamma": [h], p + "attention/output/LayerNorm/beta": [h],
                    p + "intermediate/dense/kernel": [h, i], p + "intermediate/dense/bias": [i],
                    p + "output/dense/kernel": [i, h], p + "output/dense/bias": [h],
                    p + "output/LayerNorm/gamma": [h], p + "output/LayerNorm/beta": [h]})
    return out


def main():
    tf.compat.v1.disable_eager_execution()
    rng = np.random.default_rng(28252)
    graph = tf.Graph()
    with graph.as_default():
        variables = []
        for name, shape in shapes(CONFIG).items():
            value = rng.normal(0, 0.02, shape).astype(np.float32)
            variables.append(tf.compat.v1.get_variable(name, initializer=value))
            for slot in ("adam_m", "adam_v"):  # the optimizer's slots, as in MLPerf's checkpoint
                variables.append(tf.compat.v1.get_variable(f"{name}/{slot}", initializer=np.zeros(shape, np.float32)))
        variables.append(tf.compat.v1.get_variable("global_step", initializer=np.int64(28252)))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(sess, os.path.join(HERE, "model.ckpt"), global_step=28252, write_meta_graph=False)
    names = [n for n, _ in tf.train.list_variables(prefix)]
    np.savez(os.path.join(HERE, "reference.npz"), **{n.replace("/", "|"): tf.train.load_variable(prefix, n)
                                                    for n in names})
    with open(os.path.join(HERE, "bert_config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
    print(prefix, tf.__version__, len(names))


if __name__ == "__main__":
    main()
