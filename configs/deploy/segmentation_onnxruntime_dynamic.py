# Semantic FPN / UperNet + MAViT to ONNX Runtime, dynamic batch and size: one
# ONNX file for every input size (adaptive pooling included, exactly).
_base_ = ['./_base_/onnxruntime_opset11.py']
codebase_config = dict(type='mmseg', task='Segmentation', with_argmax=True)
onnx_config = dict(
    dynamic_axes={
        'input': {0: 'batch', 2: 'height', 3: 'width'},
        'output': {0: 'batch', 2: 'height', 3: 'width'},
    })
