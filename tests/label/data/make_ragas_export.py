"""Writes tests/label/data/ragas_export.jsonl with the real ragas package (run in a venv holding ragas)."""
import sys
import ragas
from ragas import EvaluationDataset, SingleTurnSample

samples = [
    # the store-credit rule never reached the retrieved contexts: lost at retrieval
    SingleTurnSample(
        user_input="How long is store credit valid?",
        retrieved_contexts=["Gift cards are valid for 3 years from the end of the year in which they were bought."],
        response="Store credit is valid for 3 years.",
        reference="Store credit is valid for 24 months from the date it is issued."),
    # the contexts hold the rule, the response ignores it: lost at generation
    SingleTurnSample(
        user_input="Does the warranty cover normal wear and tear?",
        retrieved_contexts=["All Northwind Outfitters products come with a 2-year warranty from the date of delivery. "
                            "The warranty covers defects in materials and workmanship that appear during normal use. "
                            "It does not cover normal wear and tear, accidents, improper care or modifications."],
        response="Please send us photos of the product.",
        reference="It does not cover normal wear and tear, accidents, improper care or modifications."),
    # found and used, two claims on one page, and the reference's own context given
    SingleTurnSample(
        user_input="How much does standard shipping cost, and when is it free?",
        retrieved_contexts=["Standard shipping costs 4.95 EUR. Shipping is free for orders over 75 EUR."],
        reference_contexts=["Standard shipping costs 4.95 EUR. Shipping is free for orders over 75 EUR."],
        response="Standard shipping costs 4.95 EUR. Shipping is free for orders over 75 EUR.",
        reference="Standard shipping costs 4.95 EUR. Shipping is free for orders over 75 EUR."),
    # a reference no page states: unsupported_reference, nothing to label
    SingleTurnSample(
        user_input="Can I pay with cryptocurrency?",
        retrieved_contexts=["You can combine a gift card with any other payment method."],
        response="I don't know.",
        reference="Bitcoin payments are accepted at every Northwind store worldwide."),
]
# the row with reference_contexts first: to_csv takes its columns from the first sample
samples = [samples[2], samples[0], samples[1], samples[3]]
dataset = EvaluationDataset(samples=samples)
dataset.to_jsonl(sys.argv[1] + ".jsonl")
dataset.to_csv(sys.argv[1] + ".csv")
print("ragas", ragas.__version__, "wrote", sys.argv[1] + ".jsonl and .csv")
