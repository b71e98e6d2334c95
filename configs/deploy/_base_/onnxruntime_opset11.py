# ONNX export for ONNX Runtime, in mmdeploy's deploy-config format.
#
# Opset 11, as mmdeploy's own symbolics are written (its RoIAlign and NMS for
# the detectors; at opset 17 ONNX Runtime refuses their Squeeze with axes).
# MAViT itself exports at opset 11 too; the compatibility that mmdeploy 1.3.1
# needs on torch 2.13 comes with the model config (`mavit_mm.deploy`, in its
# custom_imports), so these files carry only mmdeploy's settings.
onnx_config = dict(
    type='onnx',
    export_params=True,
    keep_initializers_as_inputs=False,
    opset_version=11,
    save_file='end2end.onnx',
    input_names=['input'],
    output_names=['output'],
    input_shape=None,
    optimize=True)
backend_config = dict(type='onnxruntime')
